"""Child processes that must not outlive the process that started them."""

from __future__ import annotations

import ctypes  # here, not in the child: after Popen's `user=` it may no longer read Python's library
import signal


def die_with_parent() -> None:
    """Ask Linux to send this process SIGTERM when its parent dies, even by SIGKILL; call it in the
    child, after fork (as `preexec_fn` before an exec). The "parent" is the thread that forked: a
    child forked from a thread that ends gets SIGTERM then. Elsewhere than Linux it does nothing."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
