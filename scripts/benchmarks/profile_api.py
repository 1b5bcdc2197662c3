"""What Weave's own Python costs per accepted signal, in this process (issue 31, item 4).

A private MariaDB in a temporary folder, the bench's tenant (`harness.prepared`), and Weave's WSGI
app (`weave.app.create_app`, every middleware) called directly from one thread, with no HTTP server
in front: so this process's CPU time is the app's own (Falcon, the middleware, the resources,
validation, PyMySQL), and the database's is not counted. Each round sends `--signals` single
signals (`POST {N}/workflows/{id}/signals`, the bench's body and keys) and `--batches` batches of
100 (`POST {N}/signal-batches`) to fresh instances of `pay` (`workload.SIGNAL_DEFINITION`); the
CPU per signal of each is printed per round (`time.process_time`), and with `--profile` the
cProfile of the last round's singles and batches: every function's own time summed by the layer
its code belongs to (PyMySQL, Falcon, jsonschema, Weave's SQL units, …: the layers partition the
profiled time), then the top entries by own time and by cumulative time.

    .venv/bin/python scripts/benchmarks/profile_api.py [--signals 1000] [--batches 10] [--rounds 3] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `benchmarks`, run as a script

from benchmarks.harness import NS, cpu_seconds, prepared  # noqa: E402
from benchmarks.workload import SIGNAL_DEFINITION, signal_body  # noqa: E402
from weave.app import create_app  # noqa: E402
from weave.config import Config  # noqa: E402
from weave.dburl import DatabaseUrl  # noqa: E402
from weave.devdb import PrivateServer  # noqa: E402

BATCH = 100


class Caller:
    """WSGI calls of `app` with the bench client's token, as a server would make them."""

    def __init__(self, app, token: str):
        self.app = app
        self.token = token

    def post(self, path: str, body: dict, headers: dict | None = None) -> tuple[int, bytes]:
        data = json.dumps(body).encode()
        environ = {
            "REQUEST_METHOD": "POST",
            "SCRIPT_NAME": "",
            "PATH_INFO": f"/v1/namespaces/{NS}{path}",
            "QUERY_STRING": "",
            "SERVER_NAME": "bench",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_TYPE": "application/json",
            "CONTENT_LENGTH": str(len(data)),
            "HTTP_AUTHORIZATION": f"Bearer {self.token}",
            "wsgi.input": io.BytesIO(data),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for name, value in (headers or {}).items():
            environ["HTTP_" + name.upper().replace("-", "_")] = value
        status = []
        chunks = self.app(environ, lambda line, _headers, exc_info=None: status.append(line))
        text = b"".join(chunks)
        if hasattr(chunks, "close"):
            chunks.close()
        return int(status[0].split()[0]), text


def instances(caller: Caller, prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    for workflow_id in ids:
        body = {"definition": "pay", "version": 1, "input": {"order_id": "o"}, "deadline_seconds": 86400}
        status, text = caller.post("/workflows", {**body, "workflow_id": workflow_id})
        assert status == 201, text
    return ids


def singles(caller: Caller, targets: list[str], count: int, run: str) -> None:
    for n in range(count):
        status, text = caller.post(
            f"/workflows/{targets[n % len(targets)]}/signals", signal_body("o"), {"Idempotency-Key": f"{run}-{n}"}
        )
        assert status == 201, text


def threaded(threads: int, work):
    """`work(caller, targets, count, run)` shared among `threads` threads at once, each its share
    of the count and the targets: the app under concurrency (its threads switching on the GIL
    while others wait on the database), in the same process and without an HTTP server."""

    def run(caller: Caller, targets: list[str], count: int, run: str) -> None:
        pool = [
            threading.Thread(target=work, args=(caller, targets[n::threads], count // threads, f"{run}-t{n}"))
            for n in range(threads)
        ]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()

    return run


def batches(caller: Caller, targets: list[str], count: int, run: str) -> None:
    for b in range(count):
        items = [
            {
                **signal_body("o"),
                "workflow_id": targets[(b * BATCH + n) % len(targets)],
                "idempotency_key": f"{run}-{b}-{n}",
            }
            for n in range(BATCH)
        ]
        status, text = caller.post("/signal-batches", {"signals": items})
        assert status == 200 and text.count(b'"status":201') == BATCH, text[:300]


def cpu_ms_per_signal(work, signals: int, profiler: cProfile.Profile | None, database_pid: int) -> tuple[float, float]:
    """(this process's CPU, the database server's CPU) in ms per signal over `work()`."""
    started, database = time.process_time(), cpu_seconds(database_pid)
    if profiler is not None:
        profiler.enable()
    work()
    if profiler is not None:
        profiler.disable()
    return (time.process_time() - started) * 1000 / signals, (cpu_seconds(database_pid) - database) * 1000 / signals


# The layer a profiled function belongs to, by its file (the first match wins); a C function
# (file "~") by its name. Own times, so the layers add up to the whole profiled time.
LAYERS = (
    ("/pymysql/", "PyMySQL: escaping parameters, sending, parsing answers"),
    ("/falcon/", "Falcon: routing, request and response objects"),
    ("/jsonschema/", "jsonschema (bodies the compiled check does not pass)"),
    ("/referencing/", "jsonschema (bodies the compiled check does not pass)"),
    ("/weave/sql/", "Weave's SQL units (sql/)"),
    ("/sql/", "Weave's SQL units (sql/)"),
    ("/weave/tx.py", "Weave's transactions (Tx, Database)"),
    ("/weave/db.py", "Weave's transactions (Tx, Database)"),
    ("/weave/schemas/", "Weave's compiled body checks"),
    ("/weave/jsontext.py", "JSON (jsontext, json)"),
    ("/json/", "JSON (jsontext, json)"),
    ("/weave/rules/", "Weave's rules (pure decisions)"),
    ("/weave/", "Weave's request handling (resources, middleware, auth, metrics, logs)"),
    ("socket", "socket calls (the kernel's)"),
    ("recv", "socket calls (the kernel's)"),
    ("send", "socket calls (the kernel's)"),
    ("json", "JSON (jsontext, json)"),
    ("hash", "hashing (token, digests)"),
    ("sha", "hashing (token, digests)"),
)


def layer(file: str, function: str) -> str:
    where = function if file == "~" else file.replace("\\", "/")
    return next((name for mark, name in LAYERS if mark in where), "Python's library and built-ins (other)")


def layers(profiler: cProfile.Profile, title: str, signals: int) -> None:
    """The profiled own time of `title` per signal, by layer, largest first."""
    by_layer: dict[str, float] = {}
    for (file, _line, function), (_cc, _nc, own, _cum, _callers) in pstats.Stats(profiler).stats.items():
        by_layer[layer(file, function)] = by_layer.get(layer(file, function), 0.0) + own
    total = sum(by_layer.values())
    print(f"\n--- {title}: profiled own CPU per signal by layer ({total * 1e6 / signals:.0f} us in all) ---")
    for name, seconds in sorted(by_layer.items(), key=lambda item: -item[1]):
        print(f"{seconds * 1e6 / signals:8.0f} us  {seconds / total:5.1%}  {name}")


def printed(profiler: cProfile.Profile, title: str, top: int) -> None:
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).strip_dirs().sort_stats(order).print_stats(top)
        lines = out.getvalue().splitlines()
        start = next(i for i, line in enumerate(lines) if "ncalls" in line)
        print(f"\n--- {title}, by {order} ---")
        print("\n".join(lines[start - 3 : start + top + 1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=1000, help="single signals per round")
    parser.add_argument("--batches", type=int, default=10, help="batches of 100 per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="cProfile the last round (slower: compare rounds)")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--threads", type=int, default=1, help="also send the singles from this many threads at once (compare: 8)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="weave-profile-") as folder:
        server = PrivateServer(Path(folder), fast_and_unsafe=True).start()
        try:
            url = DatabaseUrl.parse(server.url("weave_profile"))
            database, token, _worker, _ns = prepared(url)
            caller = Caller(create_app(Config(database_url=url.yoyo_url()), database), token)
            caller.post("/definitions", SIGNAL_DEFINITION)
            warm = instances(caller, "warm", 1)
            singles(caller, warm, 20, "warm-s")
            batches(caller, warm * BATCH, 1, "warm-b")
            profiles, profiled_signals = {}, {}
            for round_ in range(args.rounds):
                profile = args.profile and round_ == args.rounds - 1
                figures = []
                works = [("singles", singles, args.signals, 200), ("batches", batches, args.batches * BATCH, BATCH)]
                if args.threads > 1:
                    works.insert(
                        1, (f"singles from {args.threads} threads", threaded(args.threads, singles), args.signals, 200)
                    )
                for name, work, signals, targeted in works:
                    if not signals:
                        continue
                    count = signals // BATCH if work is batches else signals
                    targets = instances(caller, f"r{round_}-{len(figures)}", targeted)
                    # cProfile sees the thread that enables it: the threaded singles are timed, not profiled
                    threads = name.startswith("singles from")
                    profiles[name] = cProfile.Profile(time.process_time) if profile and not threads else None
                    ms, database_ms = cpu_ms_per_signal(
                        lambda: work(caller, targets, count, f"r{round_}-{len(figures)}"),
                        signals,
                        profiles[name],
                        server.process.pid,
                    )
                    figures.append((name, ms, database_ms))
                    profiled_signals[name] = signals
                shown = ", ".join(
                    f"{name} {ms * 1000:.0f} us (database {db * 1000:.0f} us)" for name, ms, db in figures
                )
                by_name = {name: ms for name, ms, _ in figures}
                ratio = (
                    f", batches/singles {by_name['batches'] / by_name['singles']:.2f}"
                    if "batches" in by_name and "singles" in by_name
                    else ""
                )
                print(
                    f"round {round_ + 1}{' (profiled)' if profile else ''}: app CPU per signal {shown}{ratio}",
                    flush=True,
                )
            for name, profiler in profiles.items():
                if profiler is not None:
                    layers(profiler, name, profiled_signals[name])
                    printed(profiler, name, args.top)
            database.close()
        finally:
            server.stop()


if __name__ == "__main__":
    main()
