"""K1 (issue 31, item 3): scanners share the candidates instead of colliding on them. Three members
over one backlog process every candidate exactly once with few wasted claims; the share of a member
that stops is processed by the others after the grace; a scanner alone behaves as before."""

import threading
import time

import pytest
from helpers import assert_each_instance_advanced_once, start_task_backlog, wait_until
from prometheus_client import REGISTRY

from weave.rules import sharing
from weave.scanner import BatchReport, Scanner

BACKLOG = 300


def due_checkpoints(flow) -> int:
    return flow.rows("SELECT COUNT(*) AS n FROM checkpoints WHERE available_at <= %s", (flow.database.clock.now(),))[0][
        "n"
    ]


def members(flow) -> list[int]:
    return [row["id"] for row in flow.rows("SELECT id FROM scanner_processes ORDER BY id")]


def run_together(flow, scanners: list[Scanner]) -> list[list[BatchReport]]:
    """Each scanner in its own thread, started together, running batches until nothing is due."""
    reports: list[list[BatchReport]] = [[] for _ in scanners]
    errors: list[BaseException] = []
    start = threading.Barrier(len(scanners))

    def work(index: int) -> None:
        start.wait()
        deadline = time.monotonic() + 60
        try:
            while due_checkpoints(flow) and time.monotonic() < deadline:
                report = scanners[index].run_once()
                reports[index].append(report)
                if not report.candidates:
                    time.sleep(0.005)  # the rest is another member's share, in progress
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(scanners))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return reports


def tally(reports: list[list[BatchReport]]) -> tuple[list[int], int, int]:
    """(decisions by scanner, skipped claims, claims) of a run."""
    done = [sum(r.done for r in mine) for mine in reports]
    skipped = sum(r.skipped for mine in reports for r in mine)
    claims = sum(r.done + r.skipped + r.failed for mine in reports for r in mine)
    return done, skipped, claims


def three_members(database) -> list[Scanner]:
    scanners = [Scanner(database) for _ in range(3)]
    for scanner in scanners:
        scanner.join()
    return scanners


def test_K1_three_members_process_a_backlog_exactly_once_with_under_a_tenth_of_claims_wasted(flow, database, capsys):
    start_task_backlog(flow, database, BACKLOG)
    scanners = three_members(database)
    assert len(members(flow)) == 3
    reports = run_together(flow, scanners)
    done, skipped, claims = tally(reports)
    assert sum(done) == BACKLOG and all(n > 0 for n in done), done
    assert due_checkpoints(flow) == 0
    assert_each_instance_advanced_once(flow, BACKLOG)
    assert {r.members for mine in reports for r in mine} == {3}
    assert sum(r.taken_over for mine in reports for r in mine) == 0  # nobody's share waited past the grace
    assert skipped < 0.1 * claims, (skipped, claims)
    with capsys.disabled():
        print(f"\nthree sharing scanners: {skipped} of {claims} claims skipped ({skipped / claims:.1%})")


def test_K1_without_the_partition_three_scanners_collide_on_the_same_oldest_candidates(
    flow, database, monkeypatch, capsys
):
    """The same run with every member believing it is alone (as before issue 31): each lists the
    same oldest candidates, and most claims find another scanner's lock or its finished work."""
    monkeypatch.setattr(sharing, "membership", lambda *_: sharing.ALONE)
    start_task_backlog(flow, database, BACKLOG)
    reports = run_together(flow, three_members(database))
    done, skipped, claims = tally(reports)
    assert sum(done) == BACKLOG
    assert_each_instance_advanced_once(flow, BACKLOG)
    assert skipped > 0.2 * claims, (skipped, claims)
    with capsys.disabled():
        print(f"\nthree colliding scanners: {skipped} of {claims} claims skipped ({skipped / claims:.1%})")


def test_K1_a_member_that_stops_heartbeating_has_its_share_processed_by_the_others_after_the_grace(
    flow, database, clock
):
    start_task_backlog(flow, database, BACKLOG)
    first, second, silent = three_members(database)  # `silent` lists nothing, ever: killed after joining
    for scanner in (first, second):
        while scanner.run_once().candidates:
            pass
    left = due_checkpoints(flow)
    assert 50 <= left <= 150, left  # the silent member's share, about a third, still due
    clock.advance(sharing.STALLED.total_seconds() - 0.5)
    assert first.run_once().candidates == 0  # not stalled yet: nobody takes its share

    clock.advance(sharing.STALLED.total_seconds())  # the two wrote a heartbeat since; the silent one did not
    reports = [first.run_once(), second.run_once()]
    assert [r.members for r in reports] == [3, 3]  # still counted, but stalled: its backups take its share
    assert sum(r.done for r in reports) == left
    assert [r.taken_over for r in reports] == [r.candidates for r in reports]
    assert {r.skipped for r in reports} == {0}
    assert due_checkpoints(flow) == 0
    assert_each_instance_advanced_once(flow, BACKLOG)

    # Past `LIVE` without a heartbeat, it is no longer a member: the two split all new work at once.
    clock.advance(sharing.LIVE.total_seconds())
    assert [first.run_once().candidates, second.run_once().candidates] == [0, 0]  # both beat at this time
    start_task_backlog(flow, database, 60, prefix="late")
    reports = [first.run_once(), second.run_once()]
    assert [r.members for r in reports] == [2, 2]
    assert sum(r.done for r in reports) == 60 and all(r.done for r in reports)
    assert {r.taken_over for r in reports} == {0}


def test_K1_a_member_that_leaves_cleanly_hands_its_share_over_at_once(flow, database):
    first, second = Scanner(database), Scanner(database)
    first.join()
    second.join()
    assert first.run_once().members == 2
    second.leave()
    assert members(flow) == [first.member_id]
    start_task_backlog(flow, database, 40)
    report = first.run_once()
    assert (report.members, report.done, report.taken_over) == (1, 40, 0)


def test_K1_a_member_alone_batches_exactly_as_a_scanner_that_never_joined(flow, database):
    start_task_backlog(flow, database, 250)
    scanner = Scanner(database, threads=4)
    scanner.join()
    reports = [scanner.run_once() for _ in range(3)]
    assert [(r.members, r.candidates, r.done, r.skipped, r.failed, r.taken_over) for r in reports] == [
        (1, 100, 100, 0, 0, 0),
        (1, 100, 100, 0, 0, 0),
        (1, 50, 50, 0, 0, 0),
    ]
    assert_each_instance_advanced_once(flow, 250)


@pytest.mark.parametrize("scanner_count", [1, 2])
def test_K3_a_running_scanner_is_a_member_until_it_stops(flow, database, scanner_count):
    start_task_backlog(flow, database, 120)
    stop = threading.Event()
    scanners = [Scanner(database, idle_seconds=0.02) for _ in range(scanner_count)]
    threads = [threading.Thread(target=s.run, args=(stop,)) for s in scanners]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(members(flow)) == scanner_count)
        wait_until(lambda: due_checkpoints(flow) == 0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert members(flow) == []  # each left on its clean stop
    assert_each_instance_advanced_once(flow, 120)


def recorded(name: str, **labels) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_K1_wasted_claims_and_candidates_taken_over_are_counted(flow, database, clock):
    start_task_backlog(flow, database, 2)
    skipped_before = recorded("weave_scanner_skipped_total", source="checkpoint")
    late, early = Scanner(database), Scanner(database)
    listed = late.look()
    assert len(listed) == 2
    assert early.run_once().done == 2  # another scanner processed them after `late` listed them
    assert [late.process(candidate) for candidate in listed] == [("skipped", None)] * 2
    assert recorded("weave_scanner_skipped_total", source="checkpoint") - skipped_before == 2

    taken_before = recorded("weave_scanner_taken_over_total")
    survivor, silent = Scanner(database), Scanner(database)
    survivor.join()
    silent.join()
    start_task_backlog(flow, database, 40, prefix="more")
    own = survivor.run_once().done
    clock.advance(sharing.STALLED.total_seconds())
    report = survivor.run_once()
    assert (report.done, report.taken_over) == (40 - own, 40 - own)  # alone with it, it backs all of it
    assert recorded("weave_scanner_taken_over_total") - taken_before == 40 - own
