"""Long-polling claims never take the last server threads (issue 10, item 4; P2).

A process lets at most `max_waiting_claims` claims wait (default: half of its threads); a claim
beyond that still makes its one attempt, then answers 204 with Retry-After instead of waiting.
"""

import http.client
import json
import os
import subprocess
import sys
import threading
import time

import falcon.testing
import pytest
from helpers import task_steps

from weave.app import create_app
from weave.cli import main
from weave.config import DEFAULT_MAX_WAITING_CLAIMS, DEFAULT_THREADS, Config
from weave.devdb import free_port
from weave.resources.tasks import RETRY_AFTER_MAX_SECONDS

CLAIMS = 100
# Long enough for the 92 claims beyond the cap to be answered before the 8 waiting ones end, even
# on a loaded machine (each takes the queue row's lock in turn: 2.6-4.2 s for all 92 at a load of 7
# on 2 cores), so that the GETs below run while 8 claims wait and the burst has drained.
WAIT_SECONDS = 10


def claim_body(wait_seconds: int) -> dict:
    return {"worker_id": "w1", "lease_seconds": 30, "wait_seconds": wait_seconds}


def test_the_default_cap_leaves_half_of_the_default_threads_to_other_requests():
    assert DEFAULT_THREADS == 16 and DEFAULT_MAX_WAITING_CLAIMS == 8
    assert Config("mysql://u@h/db").max_waiting_claims == DEFAULT_MAX_WAITING_CLAIMS


def test_the_cap_comes_from_the_flag_the_environment_or_half_the_threads_and_stays_below_them(monkeypatch, capsys):
    assert [Config("mysql://u@h/db", threads=n).max_waiting_claims for n in (16, 5, 1)] == [8, 2, 0]
    assert Config("mysql://u@h/db", threads=16, max_waiting_claims=15).max_waiting_claims == 15
    with pytest.raises(ValueError, match="at most 15 waiting claims with 16 server threads"):
        Config("mysql://u@h/db", threads=16, max_waiting_claims=16)
    monkeypatch.delenv("WEAVE_MAX_WAITING_CLAIMS", raising=False)
    assert Config.from_env().max_waiting_claims == DEFAULT_MAX_WAITING_CLAIMS
    monkeypatch.setenv("WEAVE_MAX_WAITING_CLAIMS", "12")
    assert Config.from_env().max_waiting_claims == 12
    assert Config.from_env(max_waiting_claims=0).max_waiting_claims == 0  # a flag of 0 is given, not absent
    for bad in ("-1", "lots", ""):
        monkeypatch.setenv("WEAVE_MAX_WAITING_CLAIMS", bad)
        with pytest.raises(SystemExit, match="WEAVE_MAX_WAITING_CLAIMS"):
            Config.from_env()
    monkeypatch.setenv("WEAVE_DATABASE_URL", "mysql://u@127.0.0.1:1/never")  # refused before any connection
    assert main(["serve", "--threads", "4", "--max-waiting-claims", "4"]) == 1
    assert "at most 3 waiting claims with 4 server threads" in capsys.readouterr().err


def test_beyond_the_cap_a_claim_still_looks_once_then_answers_204_with_retry_after_at_once(config, database, flow):
    """A cap of 0: no claim may wait, yet a queued task is claimed; an empty queue answers at once."""
    flow.publish(task_steps("a"))
    flow.start("w1")
    flow.scan()  # the first step's task is queued
    client = falcon.testing.TestClient(create_app(Config(config.database_url, max_waiting_claims=0), database))
    path = "/v1/namespaces/acme/queues/inventory/claim"
    claimed = client.simulate_post(path, json=claim_body(5), headers=flow.worker)
    assert claimed.status_code == 200 and claimed.json["workflow_id"] == "w1"
    started = time.monotonic()
    refused = client.simulate_post(path, json=claim_body(5), headers=flow.worker)
    assert time.monotonic() - started < 1
    assert refused.status_code == 204 and 1 <= int(refused.headers["retry-after"]) <= RETRY_AFTER_MAX_SECONDS == 5
    not_waiting = client.simulate_post(path, json=claim_body(0), headers=flow.worker)  # asked for no wait
    assert not_waiting.status_code == 204 and "retry-after" not in not_waiting.headers


def ready(port: int) -> bool:
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


@pytest.fixture
def weave_serve(migrated_url):
    """`weave serve` with its defaults (16 threads, 8 waiting claims) on a free port: its port."""
    port = free_port()
    env = {**os.environ, "WEAVE_DATABASE_URL": migrated_url.yoyo_url()}
    env.pop("WEAVE_MAX_WAITING_CLAIMS", None)
    server = subprocess.Popen(
        [sys.executable, "-m", "weave.cli", "serve", "--port", str(port)], env=env, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 20
        while not ready(port):
            assert server.poll() is None and time.monotonic() < deadline, "weave serve did not start"
            time.sleep(0.05)
        yield port
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.slow
def test_100_long_polls_leave_a_get_answering_within_100_ms(weave_serve, flow, capsys):
    """`weave serve` with its default threads and cap; 100 workers long-poll an empty queue at once.
    8 wait their 10 s; the other 92 answer 204 with Retry-After without waiting; a GET of a workflow
    meanwhile answers within 100 ms (before the cap it waited 26 s, behind the polls)."""
    flow.publish(task_steps("a", queue="carrier"))  # the workflow's task is on another queue
    flow.start("w1")
    port = weave_serve
    results: list[tuple[int, str | None, float]] = []  # (status, Retry-After, seconds)
    lock = threading.Lock()
    go = threading.Barrier(CLAIMS)

    def long_poll():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            go.wait(10)
            started = time.monotonic()
            conn.request(
                "POST",
                "/v1/namespaces/acme/queues/inventory/claim",
                body=json.dumps(claim_body(WAIT_SECONDS)),
                headers={**flow.worker, "Content-Type": "application/json"},
            )
            response = conn.getresponse()
            response.read()
            with lock:
                results.append((response.status, response.getheader("Retry-After"), time.monotonic() - started))
        finally:
            conn.close()

    def timed_get() -> float:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            started = time.monotonic()
            conn.request("GET", "/v1/namespaces/acme/workflows/w1", headers=flow.headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 200
            return time.monotonic() - started
        finally:
            conn.close()

    pollers = [threading.Thread(target=long_poll, name=f"poll-{i}") for i in range(CLAIMS)]
    try:
        for poller in pollers:
            poller.start()
        # Wait (bounded) for the claims beyond the cap to be answered: the rest are now waiting.
        deadline = time.monotonic() + WAIT_SECONDS - 0.5
        while len(results) < CLAIMS - DEFAULT_MAX_WAITING_CLAIMS and time.monotonic() < deadline:
            time.sleep(0.01)
        answered_at_once = len(results)
        latencies = [timed_get() for _ in range(5)]
        polls_still_waiting = CLAIMS - len(results)
    finally:
        for poller in pollers:
            poller.join(WAIT_SECONDS + 20)
    assert not any(poller.is_alive() for poller in pollers)
    refused = [(status, int(retry_after), seconds) for status, retry_after, seconds in results if retry_after]
    waited = [(status, seconds) for status, retry_after, seconds in results if not retry_after]
    with capsys.disabled():
        print(
            f"\n{CLAIMS} long-polls, {DEFAULT_THREADS} threads, cap {DEFAULT_MAX_WAITING_CLAIMS}: GET of a workflow "
            f"in {', '.join(f'{s * 1000:.1f}' for s in latencies)} ms; {answered_at_once} claims answered before "
            f"the GETs, {len(refused)} with Retry-After (the last after "
            f"{max((r[2] for r in refused), default=0) * 1000:.0f} ms), {len(waited)} waited"
        )
    assert max(latencies) < 0.1, latencies
    assert answered_at_once == len(refused) == CLAIMS - DEFAULT_MAX_WAITING_CLAIMS
    assert polls_still_waiting == len(waited) == DEFAULT_MAX_WAITING_CLAIMS
    assert all(status == 204 and 1 <= retry_after <= RETRY_AFTER_MAX_SECONDS for status, retry_after, _ in refused)
    assert len({retry_after for _, retry_after, _ in refused}) > 1  # spread, not one herd
    # Answered without waiting: they queue for a thread behind each other, never behind the polls.
    assert max(seconds for *_, seconds in refused) < WAIT_SECONDS - 0.5
    assert all(status == 204 and seconds >= WAIT_SECONDS - 0.1 for status, seconds in waited)


def test_the_openapi_document_says_when_a_claim_answers_at_once(client):
    claim = client.simulate_get("/v1/openapi.json").json["paths"]["/v1/namespaces/{namespace}/queues/{queue}/claim"]
    assert "204" in claim["post"]["responses"]
    assert "answers 204 at once with a `Retry-After` header" in claim["post"]["description"]
    assert claim["post"]["description"].startswith("Scope: tasks:work, and a grant for the queue {queue}. ")


# ---- issue 26, item 7: a waiting claim re-checks its credential; the cap is shared per application ---


class Waiting:
    """Counts the requests that have passed their first look and wait (`waiting.look_until` entered)."""

    def __init__(self, monkeypatch):
        from weave.resources import waiting

        self.entered = 0
        self.changed = threading.Condition()
        look_until = waiting.look_until

        def counting(*args, **kwargs):
            with self.changed:
                self.entered += 1
                self.changed.notify_all()
            return look_until(*args, **kwargs)

        monkeypatch.setattr(waiting, "look_until", counting)

    def until(self, entered: int, or_else=lambda: False) -> None:
        """Until `entered` claims wait, or `or_else()` (checked every 0.1 s)."""
        deadline = time.monotonic() + 10
        with self.changed:
            while self.entered < entered and not or_else():
                assert time.monotonic() < deadline, self.entered
                self.changed.wait(0.1)


def claim_in_thread(client, headers: dict, queue: str, wait_seconds: int, answers: dict, name: str):
    """A claim long-polling in a thread of its own: its answer lands in `answers[name]` as
    (status, body, Retry-After, seconds taken)."""

    def run():
        started = time.monotonic()
        result = client.simulate_post(
            f"/v1/namespaces/acme/queues/{queue}/claim", headers=headers, json=claim_body(wait_seconds)
        )
        body = result.json if result.content else None
        answers[name] = (result.status_code, body, result.headers.get("retry-after"), time.monotonic() - started)

    thread = threading.Thread(target=run, name=f"claim-{name}")
    thread.start()
    return thread


@pytest.mark.parametrize(
    "change, status, code",
    [
        ("revoked", 401, "UNAUTHENTICATED"),
        ("expired", 401, "UNAUTHENTICATED"),
        ("application disabled", 403, "FORBIDDEN"),
    ],
)
def test_a_claim_that_waited_checks_its_credential_again_before_it_takes_a_task(
    flow, database, clock, monkeypatch, change, status, code
):
    """Issue 26, item 7: a long-poll started before a revocation handed out a task after it. The
    credential is read again before a claim that waited takes a task: a revoked or expired one is
    401, one whose application was disabled 403, as the next request would be; the task stays queued."""
    from weave import auth
    from weave.sql import tenancy

    tenancy.create_application(database, "acme", "workers", None)  # the workflow's own stays active
    token = flow.tenant.token("tasks:work", queues=("inventory",), application="workers", expires_in=60)
    credential_id = tenancy.authenticate(database, auth.token_hash(token)).credential_id
    flow.publish(task_steps("a"))
    flow.start("w1")  # its task is queued by the next scan
    waiting = Waiting(monkeypatch)
    answers: dict = {}
    thread = claim_in_thread(flow.client, {"Authorization": f"Bearer {token}"}, "inventory", 10, answers, "worker")
    waiting.until(1)
    if change == "revoked":
        tenancy.revoke_credential(database, "acme", credential_id)
    elif change == "expired":
        clock.advance(60)
    else:
        tenancy.set_application_status(database, "acme", "workers", "DISABLED")
    flow.scan()
    thread.join(15)
    answer_status, body, _, seconds = answers["worker"]
    assert (answer_status, (body or {}).get("code")) == (status, code), body
    assert seconds < 5  # at the next look, not at the end of the wait
    tasks = flow.rows("SELECT status, attempt, lease_token FROM tasks")
    assert tasks == [{"status": "QUEUED", "attempt": 0, "lease_token": None}]
    assert flow.rows("SELECT 1 FROM audit_records WHERE action = 'task.claim'") == []
    assert flow.claim("inventory").status_code == 200  # another credential still takes it


def test_the_waiting_claims_of_one_application_leave_room_for_another(config, database, flow, monkeypatch):
    """Issue 26, item 7: one application's waiting claims filled the process's cap, and every other
    application's long-poll was turned away. The slots are shared: when none is free, the
    application waiting with the most gives one up (its oldest claim answers 204 with Retry-After
    at once) to an application waiting with at least two fewer."""
    from weave.sql import tenancy

    client = falcon.testing.TestClient(
        create_app(Config(config.database_url, threads=8, max_waiting_claims=4), database)
    )
    tenancy.create_application(database, "acme", "other", None)
    other = flow.tenant.headers("tasks:work", queues=("inventory",), application="other")
    flow.publish(task_steps("a"))
    waiting = Waiting(monkeypatch)
    answers: dict = {}
    threads = []
    for i in range(4):  # `app` fills the cap, polling an empty queue
        threads.append(claim_in_thread(client, flow.worker, "carrier", 4, answers, f"app-{i}"))
        waiting.until(i + 1)
    threads.append(claim_in_thread(client, other, "inventory", 10, answers, "other"))
    waiting.until(5, or_else=lambda: "other" in answers)  # it waits (or was answered at once)
    flow.start("w1")
    flow.scan()  # the task the other application's claim waits for
    for thread in threads:
        thread.join(15)
    status, body, retry_after, _ = answers["other"]
    assert (status, (body or {}).get("workflow_id"), retry_after) == (200, "w1", None), answers["other"]
    status, _, retry_after, seconds = answers["app-0"]  # the oldest of `app`'s claims made room
    assert status == 204 and 1 <= int(retry_after) <= RETRY_AFTER_MAX_SECONDS and seconds < 3
    for i in range(1, 4):
        status, _, retry_after, seconds = answers[f"app-{i}"]
        assert (status, retry_after) == (204, None) and seconds >= 3.9


def test_waiting_claims_end_the_oldest_claim_of_the_application_with_the_most_and_clean_up():
    from contextlib import ExitStack

    from weave.resources.waiting import WaitingClaims

    slots = WaitingClaims(2)
    with ExitStack() as held:
        first, second = held.enter_context(slots.slot(1)), held.enter_context(slots.slot(1))
        newcomer = held.enter_context(slots.slot(2))
        assert (first.is_set(), second.is_set(), newcomer.is_set()) == (True, False, False)
        with slots.slot(1) as turned_away, slots.slot(2) as also_turned_away:
            assert turned_away is None and also_turned_away is None  # one each: fair already
        with slots.slot(3) as third:
            assert third is None  # 1 and 2 hold one each: a third cannot take one without leaving 0
    assert slots._waiting == {}  # every claim gone, the ended one included
    with slots.slot(3) as alone, slots.slot(3) as again:
        assert not alone.is_set() and not again.is_set()
