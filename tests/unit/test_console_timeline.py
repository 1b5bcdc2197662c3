"""The timeline's geometry (weave/console/timeline.py), a pure function: no database."""

from datetime import datetime, timedelta

from weave.console import timeline

T0 = datetime(2026, 11, 30, 7, 0, 0)
STEPS = [
    {"key": "payment", "type": "SIGNAL"},
    {"key": "track", "type": "POLL"},
]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def instance(status="NEEDS_REVIEW", updated=700):
    return {"status": status, "created_at": T0, "updated_at": at(updated)}


def activation(id_, key, sequence, status, start, settled=None, reason=None):
    return {
        "id": id_,
        "step_key": key,
        "activation_sequence": sequence,
        "status": status,
        "review_reason": reason,
        "activated_at": at(start),
        "settled_at": None if settled is None else at(settled),
    }


def wait(key, sequence, deadline, status="EXPIRED"):
    return {"step_key": key, "activation_sequence": sequence, "status": status, "deadline_at": at(deadline)}


def signal(id_, key, accepted, status="REJECTED", disposition="LATE", sequence=1):
    return {
        "id": id_,
        "target_step_key": key,
        "target_activation_sequence": sequence,
        "status": status,
        "disposition": disposition,
        "accepted_at": at(accepted),
    }


def round_(id_, activation_id, number, available, completed, status="SUCCEEDED", result='{"state":"PENDING"}'):
    return {
        "id": id_,
        "activation_id": activation_id,
        "round": number,
        "status": status,
        "available_at": at(available),
        "completed_at": None if completed is None else at(completed),
        "result": result,
        "error": None,
    }


def test_a_late_signal_is_drawn_after_its_waits_deadline_line_on_its_steps_lane():
    drawing = timeline.draw(
        STEPS,
        instance(),
        [activation(1, "payment", 1, "NEEDS_REVIEW", 0, 600, "WAIT_EXPIRED")],
        [wait("payment", 1, 600)],
        [],
        [signal(7, "payment", 600), signal(8, "payment", 590, "PENDING", None)],
        at(700),
    )
    (deadline,) = drawing.lines
    late, on_time = drawing.marks
    assert (late.kind, on_time.kind) == ("late", "pending")
    assert late.x == deadline.x > on_time.x  # equal is late: the mark sits on the line
    payment_lane = drawing.lanes[0]
    assert payment_lane.y < late.y < payment_lane.y + payment_lane.height
    assert deadline.y1 >= payment_lane.y and deadline.y2 <= payment_lane.y + payment_lane.height
    (bar,) = drawing.bars
    assert bar.kind == "needs-review" and abs(bar.x + bar.width - deadline.x) < 1e-6
    assert "WAIT_EXPIRED" in bar.title and "signal 7" in late.title and "deadline" in late.title
    assert drawing.now is not None and drawing.now.x > late.x
    assert drawing.mark_kinds == ["late", "pending"]


def test_query_rounds_are_bars_under_their_poll_step_and_a_poll_lane_is_taller():
    drawing = timeline.draw(
        STEPS,
        instance("SUCCEEDED", 60),
        [activation(1, "payment", 1, "SUCCEEDED", 0, 5), activation(2, "track", 1, "SUCCEEDED", 5, 60)],
        [],
        [round_(10, 2, 1, 5, 10), round_(11, 2, 2, 15, 60, result='{"state":"FINAL","result":{"ok":true}}')],
        [],
        at(3600),  # long after the end: an ended workflow's axis stops at its end
    )
    payment, track = drawing.lanes
    assert track.height > payment.height
    rounds = [bar for bar in drawing.bars if bar.kind.startswith("round-")]
    assert [bar.label for bar in rounds] == ["R1", "R2"]
    assert all(track.y < bar.y < track.y + track.height for bar in rounds)
    assert rounds[0].x < rounds[1].x and '"FINAL"' in rounds[1].title
    assert drawing.now is None
    assert max(bar.x + bar.width for bar in drawing.bars) <= timeline.WIDTH - timeline.RIGHT


def test_ticks_are_round_times_inside_the_axis_and_deadlines_of_settled_waits_beyond_it_are_left_out():
    drawing = timeline.draw(
        STEPS,
        instance("SUCCEEDED", 300),
        [activation(1, "payment", 1, "SUCCEEDED", 0, 300)],
        [wait("payment", 1, 3600, "SATISFIED")],
        [],
        [signal(1, "payment", 300, "CONSUMED", None)],
        at(400),
    )
    assert drawing.lines == []  # the wait was satisfied long before its deadline
    assert [tick.label for tick in drawing.ticks] == ["07:01", "07:02", "07:03", "07:04", "07:05"]
    assert all(timeline.GUTTER < tick.x <= timeline.WIDTH - timeline.RIGHT for tick in drawing.ticks)


def test_a_waiting_deadline_ahead_widens_the_axis_and_signals_of_no_step_get_a_lane():
    drawing = timeline.draw(
        STEPS,
        instance("RUNNING"),
        [activation(1, "payment", 1, "ACTIVE", 0)],
        [wait("payment", 1, 3600, "WAITING")],
        [],
        [signal(1, None, 10, "REJECTED", "LEGACY_UNVERIFIED")],
        at(60),
    )
    (deadline,) = drawing.lines
    assert drawing.now.x < deadline.x <= timeline.WIDTH - timeline.RIGHT
    assert [lane.label for lane in drawing.lanes] == ["payment", "track", "(no step)"]
    assert drawing.marks[0].y > drawing.lanes[2].y


def test_times_keep_their_microseconds_only_when_there_are_some():
    assert timeline.stamp(T0) == "2026-11-30 07:00:00Z"
    assert timeline.stamp(at(0.000001)) == "2026-11-30 07:00:00.000001Z"
    assert timeline.stamp(None) == "—"
