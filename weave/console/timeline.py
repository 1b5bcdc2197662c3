"""The geometry of a workflow's timeline, drawn by the workflow page as inline SVG.

A pure function of the facts (no I/O): one lane per step of the pinned definition; each
activation a bar from its activation to its settling (or now); each wait's deadline a line across
its lane; each signal a mark on its target step's lane at its acceptance time, classed by its
disposition; each query round of a POLL step a thin bar under the step's bars from the time it
could be claimed to its report. Everything carries a `title` (the SVG tooltip) in words.

The signals and rounds drawn are those the page lists (one page of each): the drawing is as
bounded as the page.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from weave.console.values import clip
from weave.console.words import signal_outcome

WIDTH = 960
GUTTER = 150  # step names on the left
RIGHT = 24
AXIS = 26  # tick labels above the lanes
LANE = 46
ROUNDS = 14  # the extra height of a POLL step's lane for its query rounds
MIN_BAR = 3  # a bar of an instant stays visible
NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)
MAX_TICKS = 8
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
REPORT_IN_TITLE = 120  # characters of a round's report in its tooltip


@dataclass(frozen=True)
class Lane:
    label: str
    y: float
    height: float


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    kind: str  # css class suffix: the activation's or the round's status
    label: str
    title: str


@dataclass(frozen=True)
class Line:
    x: float
    y1: float
    y2: float
    kind: str
    title: str


@dataclass(frozen=True)
class Mark:
    x: float
    y: float
    kind: str  # see words.MARK_KINDS
    label: str
    title: str


@dataclass(frozen=True)
class Tick:
    x: float
    label: str


@dataclass
class Drawing:
    width: int
    height: float
    lanes: list[Lane] = field(default_factory=list)
    bars: list[Bar] = field(default_factory=list)
    lines: list[Line] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)
    ticks: list[Tick] = field(default_factory=list)
    now: Tick | None = None

    @property
    def mark_kinds(self) -> list[str]:
        return sorted({mark.kind for mark in self.marks})


def _clock(moment: datetime, step: int) -> str:
    return moment.strftime("%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d %H:%M")


def stamp(moment: datetime | None) -> str:
    """A database time for people: UTC, microseconds only when there are any (they can decide a
    signal's lateness, so they are never rounded away)."""
    if moment is None:
        return "—"
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{moment.microsecond:06d}" if moment.microsecond else "") + "Z"


def draw(steps: list[dict], instance: dict, activations, waits, rounds, signals, now: datetime) -> Drawing:
    """The timeline of one instance. `steps` is the pinned definition's list; the rest are rows as
    `sql.timeline.read_record` reads them (`rounds`: query rounds, each with its `round` number)."""
    ended = instance["status"] in TERMINAL
    end_of_activity = instance["updated_at"] if ended else now
    moments = [instance["created_at"], end_of_activity]
    moments += [a["activated_at"] for a in activations] + [a["settled_at"] for a in activations if a["settled_at"]]
    # A deadline still ahead is worth the room; one that stopped counting is drawn only if it fits.
    moments += [w["deadline_at"] for w in waits if w["deadline_at"] and w["status"] == "WAITING"]
    moments += [s["accepted_at"] for s in signals]
    moments += [t["completed_at"] or t["available_at"] for t in rounds]
    start = instance["created_at"]
    span = max((max(moments) - start).total_seconds(), 1.0) * 1.04  # room for the last mark
    axis_end = start + timedelta(seconds=span)

    def x(moment: datetime) -> float:
        return GUTTER + (moment - start).total_seconds() / span * (WIDTH - GUTTER - RIGHT)

    drawing = Drawing(WIDTH, 0)
    lane_of: dict[str, Lane] = {}
    y = AXIS
    types = {step["key"]: step["type"] for step in steps}
    keys = [step["key"] for step in steps]
    if any(s["target_step_key"] not in types for s in signals):
        keys.append(None)  # signals of older schemas name no step
    for key in keys:
        height = LANE + (ROUNDS if types.get(key) == "POLL" else 0)
        lane = Lane(key if key is not None else "(no step)", y, height)
        lane_of[key] = lane
        drawing.lanes.append(lane)
        y += height
    drawing.height = y + 8

    activation_by_id = {a["id"]: a for a in activations}
    for a in activations:
        lane = lane_of[a["step_key"]]
        left = x(a["activated_at"])
        right = x(a["settled_at"] or end_of_activity)
        drawing.bars.append(
            Bar(
                left,
                lane.y + 17,
                max(right - left, MIN_BAR),
                14,
                a["status"].lower().replace("_", "-"),
                f"#{a['activation_sequence']}",
                f"{a['step_key']} #{a['activation_sequence']}: {a['status']}"
                + (f" ({a['review_reason']})" if a["review_reason"] else "")
                + f", activated {stamp(a['activated_at'])}, settled {stamp(a['settled_at'])}",
            )
        )
    for w in waits:
        if w["deadline_at"] is None or w["deadline_at"] > axis_end or w["step_key"] not in lane_of:
            continue
        lane = lane_of[w["step_key"]]
        drawing.lines.append(
            Line(
                x(w["deadline_at"]),
                lane.y + 6,
                lane.y + LANE - 6,
                "deadline",
                f"deadline of {w['step_key']} #{w['activation_sequence']}'s wait: {stamp(w['deadline_at'])} "
                f"(wait {w['status']})",
            )
        )
    for t in rounds:
        activation = activation_by_id.get(t["activation_id"])
        if activation is None:
            continue
        number = t["round"]
        lane = lane_of[activation["step_key"]]
        left = x(t["available_at"])
        right = x(t["completed_at"] or end_of_activity)
        report = t["result"] if t["result"] is not None else t["error"]
        drawing.bars.append(
            Bar(
                left,
                lane.y + LANE - 4,
                max(right - left, MIN_BAR),
                8,
                "round-" + t["status"].lower(),
                f"R{number}",
                f"query round {number} of #{activation['activation_sequence']} (task {t['id']}): {t['status']}"
                + (f" {clip(report, REPORT_IN_TITLE)}" if report is not None else "")
                + f", claimable {stamp(t['available_at'])}, reported {stamp(t['completed_at'])}",
            )
        )
    for s in signals:
        lane = lane_of[s["target_step_key"] if s["target_step_key"] in types else None]
        kind, words = signal_outcome(s)
        drawing.marks.append(
            Mark(
                x(s["accepted_at"]),
                lane.y + 10,
                kind,
                str(s["id"]),
                f"signal {s['id']} for #{s['target_activation_sequence']}, accepted {stamp(s['accepted_at'])}: "
                f"{s['status']}{' / ' + s['disposition'] if s['disposition'] else ''}. {words}",
            )
        )

    step = next((n for n in NICE_STEPS if span / n <= MAX_TICKS), NICE_STEPS[-1])
    midnight = start.replace(hour=0, minute=0, second=0, microsecond=0)
    first = midnight + timedelta(seconds=((start - midnight).total_seconds() // step + 1) * step)
    tick = first
    while x(tick) <= WIDTH - RIGHT:
        drawing.ticks.append(Tick(x(tick), _clock(tick, step)))
        tick += timedelta(seconds=step)
    if not ended:
        drawing.now = Tick(x(now), "now")
    return drawing
