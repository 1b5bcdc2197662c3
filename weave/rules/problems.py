"""What the rules report when they refuse something: where (a JSON pointer) and why.

Callers turn them into a problem+json `errors` list (`{"pointer", "message"}`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    pointer: str
    message: str
