"""Who may long-poll (P2): the waiting slots of one API process shared between applications.

A process lets at most `capacity` claims wait at once (`--max-waiting-claims`). A free slot is
anyone's, so one application alone may use them all. When none is free, the application waiting
with the most claims gives one up to an application waiting with at least two fewer, so that after
the move it still waits with at least as many: no application can keep another out of the slots,
and the shares end max-min fair (8 slots, three applications: 3, 3 and 2). Otherwise the claim is
turned away (204 with Retry-After), as when one application holds every slot of a cap of one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

WAIT = "WAIT"  # the claim waits in a slot
TURN_AWAY = "TURN_AWAY"  # it answers 204 with Retry-After at once


@dataclass(frozen=True)
class Admission:
    decision: str  # WAIT or TURN_AWAY
    ends: int | None = None  # WAIT by ending a waiting claim of this application: it gives up its slot


def admit(waiting: Mapping[int, int], application: int, capacity: int) -> Admission:
    """Whether a claim of `application` may wait, given how many claims each application has
    waiting now (`waiting`, applications with none left out) and the process's `capacity`."""
    if sum(waiting.values()) < capacity:
        return Admission(WAIT)
    if not waiting:
        return Admission(TURN_AWAY)  # a capacity of 0: nobody waits
    # The smallest id among those holding the most, so that the choice does not depend on order.
    richest = min(waiting, key=lambda other: (-waiting[other], other))
    if waiting[richest] >= waiting.get(application, 0) + 2:
        return Admission(WAIT, ends=richest)
    return Admission(TURN_AWAY)
