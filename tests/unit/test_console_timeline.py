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


def instance(status="NEEDS_REVIEW", updated=700, deadline=None):
    return {
        "status": status,
        "created_at": T0,
        "updated_at": at(updated),
        "deadline_at": None if deadline is None else at(deadline),
    }


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


def test_issue_34_5_signals_at_the_same_instant_are_stacked_and_their_lane_widens_under_them():
    same = [signal(11, "payment", 100, "PENDING", None), signal(12, "payment", 100), signal(13, "payment", 100.5)]
    alone = [signal(14, "payment", 500)]
    drawing = timeline.draw(
        STEPS,
        instance(),
        [activation(1, "payment", 1, "NEEDS_REVIEW", 0, 600, "WAIT_EXPIRED")],
        [wait("payment", 1, 600)],
        [],
        [*same, *alone],
        at(700),
    )
    marks = {int(mark.label): mark for mark in drawing.marks}
    rows = sorted(marks[i].y for i in (11, 12, 13))
    assert rows[1] - rows[0] == rows[2] - rows[1] == timeline.MARK_ROW  # three rows, none drawn over another
    assert marks[14].y == rows[0]  # a mark with room on the first row stays there
    payment, track = drawing.lanes[:2]
    assert payment.stacked == 2 * timeline.MARK_ROW and payment.height == timeline.LANE + 2 * timeline.MARK_ROW
    assert track.y == payment.y + payment.height and track.stacked == 0
    (bar,) = drawing.bars
    assert bar.y > rows[2] + 6  # the activation's bar sits below the lowest row of marks
    (deadline,) = drawing.lines
    assert deadline.y2 <= payment.y + payment.height


def test_issue_34_5_rows_go_to_the_first_row_that_has_room():
    assert timeline.mark_rows([(0, 20), (10, 30), (25, 40), (35, 50)]) == [0, 1, 0, 1]
    assert timeline.mark_rows([]) == []


def test_issue_34_5_the_total_deadline_is_a_line_across_every_lane_or_a_note_beyond_the_axis():
    inside = timeline.draw(
        STEPS, instance("RUNNING", deadline=50), [activation(1, "payment", 1, "ACTIVE", 0)], [], [], [], at(60)
    )
    line = inside.total_deadline
    assert line is not None and line.kind == "total-deadline" and "07:00:50Z" in line.title
    assert inside.now.x > line.x and (line.y1, line.y2) == (timeline.AXIS, inside.height)
    assert inside.total_deadline_beyond is None
    beyond = timeline.draw(
        STEPS, instance("RUNNING", deadline=86400), [activation(1, "payment", 1, "ACTIVE", 0)], [], [], [], at(60)
    )
    assert beyond.total_deadline is None and beyond.total_deadline_beyond == "2026-12-01 07:00:00Z"
    assert max(tick.x for tick in beyond.ticks) <= timeline.WIDTH - timeline.RIGHT  # the axis did not stretch to it


def test_times_keep_their_microseconds_only_when_there_are_some():
    assert timeline.stamp(T0) == "2026-11-30 07:00:00Z"
    assert timeline.stamp(at(0.000001)) == "2026-11-30 07:00:00.000001Z"
    assert timeline.stamp(None) == "—"
