"""The geometry of a workflow's timeline, drawn by the workflow page as inline SVG.

A pure function of the facts (no I/O): one lane per step of the pinned definition; each
activation a bar from its activation to its settling (or now); each wait's deadline a line across
its lane; the instance's total deadline a line across every lane (or, beyond the axis, a note);
each signal a mark on its target step's lane at its acceptance time, classed by its disposition,
marks that would overlap (signals accepted at about the same time) stacked in rows that widen
their lane; each query round of a POLL step a thin bar under the step's bars from the time it
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
MARK_ROW = 13  # the height of one row of stacked signal marks
MARK_LEFT = 7  # a mark's diamond reaches this far left of its time
MARK_LABEL_CHAR = 6.5  # the width of one character of a mark's label (10.5 px text), with room


@dataclass(frozen=True)
class Lane:
    label: str
    y: float
    height: float
    stacked: float = 0  # the extra height of its rows of signal marks beyond the first; its bars sit below them


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
    total_deadline: Line | None = None  # the instance's total deadline, when it is inside the axis
    total_deadline_beyond: str | None = None  # its time, when it is beyond the axis's right end

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


def mark_rows(spans: list[tuple[float, float]]) -> list[int]:
    """The row of each mark, given each one's (left, right) in the drawing, in order of time: the
    first row where it overlaps no mark already placed (greedy, as a calendar lays out events)."""
    ends: list[float] = []  # the right end of the last mark of each row
    rows = []
    for left, right in spans:
        row = next((i for i, end in enumerate(ends) if end <= left), len(ends))
        if row == len(ends):
            ends.append(right)
        else:
            ends[row] = right
        rows.append(row)
    return rows


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
    # Signal marks first: their rows decide the height of their lane.
    lane_key = [s["target_step_key"] if s["target_step_key"] in types else None for s in signals]
    row_of: dict[int, int] = {}
    for key in keys:
        mine = sorted((s for s, k in zip(signals, lane_key) if k == key), key=lambda s: (s["accepted_at"], s["id"]))
        spans = [
            (x(s["accepted_at"]) - MARK_LEFT, x(s["accepted_at"]) + 8 + len(str(s["id"])) * MARK_LABEL_CHAR)
            for s in mine
        ]
        row_of.update({s["id"]: row for s, row in zip(mine, mark_rows(spans))})
    for key in keys:
        rows = max((row_of[s["id"]] + 1 for s, k in zip(signals, lane_key) if k == key), default=1)
        stacked = (rows - 1) * MARK_ROW
        height = LANE + stacked + (ROUNDS if types.get(key) == "POLL" else 0)
        lane = Lane(key if key is not None else "(no step)", y, height, stacked)
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
                lane.y + lane.stacked + 17,
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
                lane.y + lane.stacked + LANE - 6,
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
                lane.y + lane.stacked + LANE - 4,
                max(right - left, MIN_BAR),
                8,
                "round-" + t["status"].lower(),
                f"R{number}",
                f"query round {number} of #{activation['activation_sequence']} (task {t['id']}): {t['status']}"
                + (f" {clip(report, REPORT_IN_TITLE)}" if report is not None else "")
                + f", claimable {stamp(t['available_at'])}, reported {stamp(t['completed_at'])}",
            )
        )
    for s, key in zip(signals, lane_key):
        lane = lane_of[key]
        kind, words = signal_outcome(s)
        drawing.marks.append(
            Mark(
                x(s["accepted_at"]),
                lane.y + 10 + row_of[s["id"]] * MARK_ROW,
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
    total = instance.get("deadline_at")
    if total is not None and total <= axis_end:
        drawing.total_deadline = Line(
            x(total), AXIS, drawing.height, "total-deadline", f"total deadline: {stamp(total)}"
        )
    elif total is not None:
        drawing.total_deadline_beyond = stamp(total)
    return drawing
