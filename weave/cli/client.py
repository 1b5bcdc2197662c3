"""`weave workflow …` and `weave signal …`: the command line for people, on `weave.sdk` only.

These commands talk to a running Weave over HTTP with a token, never to the database:

    weave workflow start DEFINITION --version N --input JSON --deadline-seconds S [--id WORKFLOW_ID]
    weave workflow list [--status S] [--definition NAME] [--correlation-key KEY] [--id-prefix TEXT]
    weave workflow show ID                  steps, waits, tasks, results and signals, as tables
    weave workflow events ID                every member of each event's data, wrapped; decisions first
    weave workflow export ID [--output FILE]  everything Weave holds of it, as the server answers it (L2)
    weave workflow pause|resume|cancel ID --reason TEXT
    weave workflow review ID --action retry_step|complete_step|fail|cancel [--step KEY] [--result JSON] --reason TEXT
    weave workflow review ID --action extend_deadline --deadline-seconds S --reason TEXT
    weave workflow review --all [--status S] [--definition NAME] [--reason-code CODE] [--dry-run]
                         --action retry_step|fail|cancel|extend_deadline [...] --reason TEXT
                                            each listed workflow reviewed on its own, one line each
    weave signal send ID --step KEY --name NAME --payload-version V --correlation-key K
                         [--sequence N] [--payload JSON] [--evidence-ref REF] [--idempotency-key KEY] --reason TEXT
    weave signal route --name NAME --payload-version V --correlation-key K [--park-seconds S]
                         [--payload JSON] [--evidence-ref REF] [--idempotency-key KEY] --reason TEXT
    weave signal send-batch FILE            JSON lines (`-`: standard input), one signal body per line: with
                                            `workflow_id` as `send`, without as `route`; one line per result
    weave signal list ID [--status S]
    weave signal show [ID] SIGNAL_ID [--wait-seconds S]   without ID: a fact sent by `route`, wherever it is

The server, token and namespace come from `--url`/`WEAVE_URL` (default http://127.0.0.1:8080),
`--token`/`WEAVE_TOKEN` and `--namespace`/`WEAVE_NAMESPACE`. A JSON argument is given inline or
as `@file.json` (`@-` reads standard input) and is sent exactly (decimals and member order kept).
`--json` prints what the server answered as one JSON object instead of tables. An error answer
prints its problem code, detail and pointers to standard error and exits 1 (with `--json`, its
problem+json document, one line, as the server answered it). `weave definition …`
is in `weave.cli.definitions`, on the helpers here.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from weave import sdk

DEFAULT_URL = "http://127.0.0.1:8080"
WAIT_SECONDS_MAX = 20  # the longest a signal read waits for its signal to settle (B6)
JSON_CELL_MAX_CHARS = 60  # results, inputs, a value of event data: the first characters say enough
# `workflow events` shows every member of an event's data, wrapped at this width: these first, as
# they say what was decided and why (a POLL decision and its rule, a task's outcome).
EVENT_DATA_WIDTH = 72
EVENT_FIELDS_FIRST = (
    "decision",
    "rule",
    "outcome",
    "report",
    "status",
    "gate",
    "review_reason",
    "disposition",
    "step",
    "activation_sequence",
    "round",
    "signal_id",
)
TEXT_CELL_MAX_CHARS = 120
WORKFLOW_STATUSES = ("RUNNING", "PAUSED", "NEEDS_REVIEW", "SUCCEEDED", "FAILED", "CANCELLED")
SIGNAL_STATUSES = ("PENDING", "CONSUMED", "REJECTED", "EXPIRED")
REVIEW_ACTIONS = ("retry_step", "complete_step", "fail", "cancel", "extend_deadline")


# ---- arguments ------------------------------------------------------------------------------------


def json_argument(text: str) -> Any:
    """A JSON value from the command line: inline, `@path` or `@-` (standard input)."""
    source = "the argument"
    if text.startswith("@"):
        source = text[1:] or "-"
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise argparse.ArgumentTypeError(f"cannot read {source}: {exc.strerror}") from None
    try:
        return sdk.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{source} is not JSON: {exc}") from None


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive integer")
    return int(text)


def _wait_seconds(text: str) -> int:
    if not text.isdigit() or int(text) > WAIT_SECONDS_MAX:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a whole number of seconds from 0 to {WAIT_SECONDS_MAX}")
    return int(text)


def _client(args) -> sdk.Client | None:
    url = args.url or os.environ.get("WEAVE_URL") or DEFAULT_URL
    token = args.token or os.environ.get("WEAVE_TOKEN")
    namespace = args.namespace or os.environ.get("WEAVE_NAMESPACE")
    if not token or not namespace:
        return None
    return sdk.Client(url, token, namespace, timeout=args.timeout)


def _command(
    run: Callable[[sdk.Client, argparse.Namespace], int | None],
    what_now: Callable[[sdk.Client, argparse.Namespace, sdk.WeaveError], list[str]] | None = None,
) -> Callable[[argparse.Namespace], int]:
    """A command that prints a problem answer (code, detail, pointers, and the commands `what_now`
    suggests instead) and exits 1 on it."""

    def command(args) -> int:
        client = _client(args)
        if client is None:
            print("weave: set WEAVE_TOKEN and WEAVE_NAMESPACE (or pass --token and --namespace)", file=sys.stderr)
            return 2
        try:
            status = run(client, args)
        except sdk.WeaveError as exc:
            if getattr(args, "json", False):  # a program reads the error as it reads an answer
                print(sdk.dumps(exc.problem), file=sys.stderr)
                return 1
            print(f"weave: {exc.code}: {exc.detail}", file=sys.stderr)
            for error in exc.errors:
                print(f"  {error.get('pointer') or '/'}: {error.get('message', '')}", file=sys.stderr)
            for line in what_now(client, args, exc) if what_now else ():
                print(f"  what now: {line}", file=sys.stderr)
            return 1
        return status or 0

    return command


# ---- output ---------------------------------------------------------------------------------------


def _print_json(value: Any) -> None:
    print(sdk.dumps(value))


def _time(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else "-"


def _cell(value: Any) -> str:
    if value is None or value == "":
        return "-"
    limit = TEXT_CELL_MAX_CHARS if isinstance(value, str) else JSON_CELL_MAX_CHARS
    text = " ".join((value if isinstance(value, str) else sdk.dumps(value)).split())  # one line per row
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(headers: list[str], rows: list[list[Any]], wrap: int | None = None) -> str:
    """Left-aligned columns, two spaces apart; cells are shortened to one line. With `wrap`, the
    last column (text) is not shortened but wrapped at that many characters, its further lines
    under its first."""
    if wrap is None:
        cells = [[_cell(value) for value in row] for row in rows]
    else:
        cells = [
            [*map(_cell, row[:-1]), "\n".join(textwrap.wrap(row[-1], wrap, break_on_hyphens=False))] for row in rows
        ]
    widths = [max(len(row[i].split("\n", 1)[0]) for row in [headers, *cells]) for i in range(len(headers))]
    indent = " " * (sum(widths[:-1]) + 2 * (len(widths) - 1))
    lines = []
    for row in [headers, *cells]:
        head, *more = row[-1].split("\n") if row[-1] else ["-"]
        lines.append("  ".join(text.ljust(width) for text, width in zip([*row[:-1], head], widths)).rstrip())
        lines += [indent + line for line in more]
    return "\n".join(lines)


def _status_line(workflow: sdk.Workflow) -> str:
    reason = f" ({workflow.review_reason})" if workflow.review_reason else ""
    return f"workflow {workflow.workflow_id}: {workflow.status}{reason}, gate {workflow.gate}"


def _what_now(workflow: sdk.Workflow) -> list[str]:
    """The commands that repair a workflow in NEEDS_REVIEW, for a person reading `show` or a refused
    review: the step under review's, or, when the workflow stopped at its total deadline before a
    step started (no step under review), a new deadline; failing or cancelling it always."""
    if workflow.status != "NEEDS_REVIEW":
        return []
    command = f"weave workflow review {workflow.workflow_id}"
    under_review = next((step.key for step in workflow.steps if step.status == "NEEDS_REVIEW"), None)
    if under_review is not None:
        first = f"{command} --action retry_step|complete_step --step {under_review} [--result JSON] --reason TEXT"
    elif workflow.review_reason == "DEADLINE_EXCEEDED":
        first = f"{command} --action extend_deadline --deadline-seconds S --reason TEXT   (it then goes on)"
    else:
        first = None
    return [line for line in (first, f"{command} --action fail|cancel --reason TEXT") if line]


def _wait_cell(wait: sdk.Wait | None) -> str | None:
    if wait is None:
        return None
    text = f"{wait.status} until {_time(wait.deadline_at)} key {wait.correlation_key!r}"
    return text + (f" won by signal {wait.winner_signal_id}" if wait.winner_signal_id else "")


def _task_cell(task: sdk.StepTask | None) -> str | None:
    return None if task is None else f"{task.task_id} {task.status} attempt {task.attempt}"


def disposition(signal: sdk.Receipt) -> str | None:
    """A signal's disposition as shown: `won` for the one a wait took (CONSUMED, whose disposition is
    null: nothing kept it from being used)."""
    return "won" if signal.status == "CONSUMED" and signal.disposition is None else signal.disposition


def _signal_rows(signals: list[sdk.Signal]) -> str:
    return table(
        ["SIGNAL", "NAME", "STEP", "SEQ", "STATUS", "DISPOSITION", "ACCEPTED", "CORRELATION", "ACTOR"],
        [
            [
                s.signal_id,
                s.name,
                s.target_step_key,
                str(s.target_activation_sequence),
                s.status,
                disposition(s),
                _time(s.accepted_at),
                s.correlation_key,
                s.actor,
            ]
            for s in signals
        ],
    )


# ---- commands -------------------------------------------------------------------------------------


def workflow_start(client: sdk.Client, args) -> None:
    workflow = client.start_workflow(
        args.definition, args.version, args.input, args.deadline_seconds, workflow_id=args.workflow_id
    )
    _print_workflow(workflow, args)


def workflow_list(client: sdk.Client, args) -> None:
    workflows = list(
        client.list_workflows(
            status=args.status,
            definition=args.definition,
            correlation_key=args.correlation_key,
            workflow_id_prefix=args.id_prefix,
        )
    )
    if args.json:
        _print_json({"workflows": [w.raw for w in workflows]})
        return
    print(
        table(
            ["WORKFLOW", "DEFINITION", "STATUS", "GATE", "REVIEW REASON", "DEADLINE", "CREATED"],
            [
                [
                    w.workflow_id,
                    f"{w.definition} v{w.version}",
                    w.status,
                    w.gate,
                    w.review_reason,
                    _time(w.deadline_at),
                    _time(w.created_at),
                ]
                for w in workflows
            ],
        )
    )


def workflow_show(client: sdk.Client, args) -> None:
    workflow = client.get_workflow(args.workflow_id)
    signals = list(client.list_signals(args.workflow_id))
    if args.json:
        _print_json({"workflow": workflow.raw, "signals": [s.raw for s in signals]})
        return
    print(_status_line(workflow))
    for line in _what_now(workflow):
        print(f"  what now: {line}")
    print(f"definition {workflow.definition} v{workflow.version}, created {_time(workflow.created_at)}, ", end="")
    print(f"deadline {_time(workflow.deadline_at)}")
    print(f"input {_cell(workflow.input)}")
    print()
    print(
        table(
            ["STEP", "TYPE", "SEQ", "STATUS", "REVIEW", "TASK", "WAIT", "RESULT"],
            [
                [
                    step.key,
                    step.type,
                    str(step.activation_sequence) if step.activation_sequence is not None else None,
                    step.status,
                    step.review_reason,
                    _task_cell(step.task),
                    _wait_cell(step.wait),
                    step.result,
                ]
                for step in workflow.steps
            ],
        )
    )
    print()
    print(_signal_rows(signals) if signals else "no signals")


def workflow_events(client: sdk.Client, args) -> None:
    events = list(client.events(args.workflow_id))
    if args.json:
        _print_json({"events": [e.raw for e in events]})
        return
    rows = [[str(e.seq), _time(e.at), e.type, event_data(e.data)] for e in events]
    print(table(["SEQ", "AT", "TYPE", "DATA"], rows, wrap=EVENT_DATA_WIDTH))


def workflow_export(client: sdk.Client, args) -> None:
    """The export document as the server answered it (the SDK reads it exactly, `dumps` writes it
    back byte for byte); to a file with --output (nothing on standard output then)."""
    text = sdk.dumps(client.export_workflow(args.workflow_id))
    if args.output is None:
        print(text)
        return
    Path(args.output).write_text(text, encoding="utf-8")


def event_data(data: Any) -> str:
    """An event's data as `name=value` pairs, what it tells first (`EVENT_FIELDS_FIRST`), each value
    on one line and cut at `JSON_CELL_MAX_CHARS`: a decision, a rule or an outcome is never cut."""
    if not isinstance(data, dict):
        return _cell(data)
    order = {name: i for i, name in enumerate(EVENT_FIELDS_FIRST)}
    names = sorted(data, key=lambda name: order.get(name, len(order)))  # stable: the rest as recorded
    return " ".join(f"{name}={_value(data[name])}" for name in names)


def _value(value: Any) -> str:
    plain = isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value)
    text = value if plain else " ".join(sdk.dumps(value).split())
    return text if len(text) <= JSON_CELL_MAX_CHARS else text[: JSON_CELL_MAX_CHARS - 1] + "…"


def workflow_control(client: sdk.Client, args) -> None:
    workflow = getattr(client, args.action)(args.workflow_id, args.reason)
    _print_workflow(workflow, args)


def workflow_review(client: sdk.Client, args) -> None:
    workflow = client.review(
        args.workflow_id,
        args.review_action,
        args.reason,
        step_key=args.step,
        result=args.result,
        deadline_seconds=args.deadline_seconds,
    )
    _print_workflow(workflow, args)


def review_refused(client: sdk.Client, args, exc: sdk.WeaveError) -> list[str]:
    """A review refused as things stand (INVALID_STATE): what can be done instead."""
    if args.workflow_id is None:
        return []
    return _what_now(client.get_workflow(args.workflow_id)) if exc.code == "INVALID_STATE" else []


def _step_under_review(workflow: sdk.Workflow) -> str | None:
    return next((step.key for step in workflow.steps if step.status == "NEEDS_REVIEW"), None)


def workflow_review_all(client: sdk.Client, args) -> int:
    """`review --all`: the action on every workflow the filters list, each its own review call
    (its own transaction and audit record), one line each; exit 1 when any was refused. With
    `--dry-run`, what would be done, and nothing is."""
    picked = [
        w
        for w in client.list_workflows(status=args.status, definition=args.definition)
        if args.reason_code is None or w.review_reason == args.reason_code
    ]
    results = []
    for summary in picked:
        try:
            step = args.step
            if args.review_action == "retry_step":  # each workflow's own step under review
                under_review = _step_under_review(client.get_workflow(summary.workflow_id))
                if under_review is None or args.step not in (None, under_review):
                    said = "no step is under review" if under_review is None else f"step {under_review} is under review"
                    results.append((summary, None, said))
                    continue
                step = under_review
            if args.dry_run:
                results.append((summary, None, "would " + args.review_action + (f" step {step}" if step else "")))
                continue
            workflow = client.review(
                summary.workflow_id,
                args.review_action,
                args.reason,
                step_key=step,
                deadline_seconds=args.deadline_seconds,
            )
            results.append((summary, workflow, None))
        except sdk.WeaveError as exc:  # refused for this workflow: the others go on
            results.append((summary, None, exc))
    if args.json:
        _print_json({"results": [_review_result(summary, workflow, note) for summary, workflow, note in results]})
    else:
        for summary, workflow, note in results:
            if workflow is not None:
                print(f"{summary.workflow_id}: {args.review_action} done: {workflow.status}, gate {workflow.gate}")
            elif isinstance(note, sdk.WeaveError):
                print(f"{summary.workflow_id}: refused {note.code}: {note.detail}")
            else:
                print(f"{summary.workflow_id}: {note}")
        if not results:
            print("no workflow matched")
    refused = any(workflow is None and not args.dry_run for _, workflow, _ in results)
    return 1 if refused else 0


def _review_result(summary: sdk.Workflow, workflow: sdk.Workflow | None, note) -> dict:
    if workflow is not None:
        return {"workflow_id": summary.workflow_id, "done": True, "workflow": workflow.raw}
    if isinstance(note, sdk.WeaveError):
        return {"workflow_id": summary.workflow_id, "done": False, "problem": note.problem}
    return {"workflow_id": summary.workflow_id, "done": False, "note": note}


def _review_command(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    """`review ID` or `review --all` (one of them; complete_step names one workflow's result)."""
    one, many = _command(workflow_review, review_refused), _command(workflow_review_all)

    def command(args) -> int:
        if (args.workflow_id is None) == (not args.all):
            parser.error("give a workflow id or --all, not both")
        if args.all and args.review_action == "complete_step":
            parser.error("--all cannot complete_step: a result belongs to one workflow")
        if not args.all and (args.dry_run or args.reason_code):
            parser.error("--dry-run and --reason-code go with --all")
        return (many if args.all else one)(args)

    return command


def _print_workflow(workflow: sdk.Workflow, args) -> None:
    if args.json:
        _print_json(workflow.raw)
    else:
        print(_status_line(workflow))


def signal_send(client: sdk.Client, args) -> None:
    receipt = client.send_signal(
        args.workflow_id, target_step_key=args.step, target_activation_sequence=args.sequence, **_fact(args)
    )
    if args.json:
        _print_json(receipt.raw)
        return
    print(f"signal {receipt.signal_id}: {_acceptance(receipt)}")
    if receipt.replayed:  # S1.7: the receipt is the first acceptance's, frozen; the signal has moved on since
        print(f"  that receipt is frozen at the first acceptance; the signal now: {_current_state(client, receipt)}")


def _fact(args) -> dict[str, Any]:
    """The arguments of `_fact_arguments`, as `send_signal` and `route_signal` take them."""
    names = ("name", "payload_version", "correlation_key", "reason", "payload", "evidence_ref", "idempotency_key")
    return {name: getattr(args, name) for name in names}


def _acceptance(receipt: sdk.Receipt) -> str:
    replayed = ", a replay of the first send" if receipt.replayed else ""
    return (
        f"{_state(receipt)}, accepted {_time(receipt.accepted_at)}, idempotency key {receipt.idempotency_key}{replayed}"
    )


def _state(signal: sdk.Receipt) -> str:
    shown = disposition(signal)
    return f"{signal.status} ({shown})" if shown else str(signal.status)


def _current_state(client: sdk.Client, receipt: sdk.Receipt) -> str:
    """The signal's current status and disposition (one GET), or why it could not be read: a
    credential that may send a signal need not be one that may read it."""
    try:
        return _state(client.get_signal(receipt.workflow_id, receipt.signal_id))
    except sdk.Forbidden:
        return "not readable with this token (reading needs workflows:read)"
    except sdk.WeaveError as exc:
        return f"could not be read ({exc.code}: {exc.detail})"


def signal_route(client: sdk.Client, args) -> None:
    """A fact by its business key (B1-B3): where it went."""
    receipt = client.route_signal(park_seconds=args.park_seconds, **_fact(args))
    if args.json:
        _print_json(receipt.raw)
        return
    print(f"signal {receipt.signal_id}: {_routed_to(receipt)}; {_acceptance(receipt)}")


def _routed_to(receipt: sdk.RoutedReceipt) -> str:
    """Where a fact sent by its business key went (B3)."""
    if receipt.route == "ROUTED":
        return (
            f"routed to workflow {receipt.workflow_id}, step {receipt.target_step_key} "
            f"(activation {receipt.target_activation_sequence})"
        )
    if receipt.route == "PARKED":
        return f"parked until {_time(receipt.parked_until)}: the wait that opens for its key takes it"
    return "not routed: more than one workflow waits for this key"


def batch_items(path: str) -> list[dict]:
    """The items of `signal send-batch`: one JSON object per non-blank line of the file (`-`: stdin)."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc.strerror}") from None
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                items.append(sdk.loads(line))
            except ValueError as exc:
                raise argparse.ArgumentTypeError(f"{path} line {number} is not JSON: {exc}") from None
            if not isinstance(items[-1], dict):
                raise argparse.ArgumentTypeError(f"{path} line {number} is not a JSON object")
    return items


def signal_send_batch(client: sdk.Client, args) -> None:
    """Up to 100 signals in one request (B8): one line per item, in order, as `send`/`route` say it."""
    results = client.send_signals(args.items)
    for number, result in enumerate(results, 1):
        if args.json:
            _print_json(result.raw if isinstance(result, sdk.Receipt) else _refusal(result))
        elif isinstance(result, sdk.Receipt):
            where = f"{_routed_to(result)}; " if isinstance(result, sdk.RoutedReceipt) else ""
            print(f"{number}: signal {result.signal_id}: {where}{_acceptance(result)}")
        else:
            pointers = "".join(f"; {e.get('pointer') or '/'}: {e.get('message', '')}" for e in result.errors[1:])
            print(f"{number}: refused {result.status} {result.code}: {result.detail}{pointers}")


def _refusal(error: sdk.WeaveError) -> dict:
    return {"status": error.status, "code": error.code, "detail": error.detail, "errors": error.errors}


def signal_list(client: sdk.Client, args) -> None:
    signals = list(client.list_signals(args.workflow_id, status=args.status))
    if args.json:
        _print_json({"signals": [s.raw for s in signals]})
        return
    print(_signal_rows(signals) if signals else "no signals")


def signal_show(client: sdk.Client, args) -> None:
    """A signal of a workflow (`show ID SIGNAL_ID`), or a fact sent by its business key wherever
    it is now (`show SIGNAL_ID`: parked, routed, expired or refused, B6)."""
    if args.signal_id is None:
        signal = client.get_routed_signal(args.workflow_id, wait_seconds=args.wait_seconds)
    else:
        signal = client.get_signal(args.workflow_id, args.signal_id, wait_seconds=args.wait_seconds)
    if args.json:
        _print_json(signal.raw)
        return
    shown = {**signal.raw, "disposition": disposition(signal)}
    rows = [[name, value] for name, value in shown.items() if name != "payload"]
    rows.append(["payload", "(absent)" if signal.payload is sdk.ABSENT else sdk.dumps(signal.payload)])
    print(table(["FIELD", "VALUE"], rows))


# ---- parser ---------------------------------------------------------------------------------------


def _fact_arguments(p: argparse.ArgumentParser) -> None:
    """What `signal send` and `signal route` both send: the contract, the key, the fact and why."""
    p.add_argument("--name", required=True, help="the contract's signal name")
    p.add_argument("--payload-version", required=True)
    p.add_argument("--correlation-key", required=True)
    p.add_argument("--payload", type=json_argument, default=sdk.ABSENT, help="JSON or @file.json (absent if not given)")
    p.add_argument("--evidence-ref", help="an opaque reference to the evidence")
    p.add_argument("--idempotency-key", help="default: a new one for this command (retries inside it reuse it)")
    p.add_argument("--reason", required=True, help="why (audited)")


def remote_arguments() -> argparse.ArgumentParser:
    """The arguments of every command that talks to a server (a parent parser)."""
    remote = argparse.ArgumentParser(add_help=False)
    remote.add_argument("--url", help=f"Weave's base URL (default: $WEAVE_URL or {DEFAULT_URL})")
    remote.add_argument("--token", help="bearer token (default: $WEAVE_TOKEN; prefer the variable)")
    remote.add_argument("--namespace", help="namespace (default: $WEAVE_NAMESPACE)")
    remote.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default 30)")
    remote.add_argument("--json", action="store_true", help="print the server's answer as one JSON object")
    return remote


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add `workflow` and `signal` to the `weave` command's subcommands."""
    remote = remote_arguments()

    workflow = commands.add_parser("workflow", help="list, show and control workflows through the API")
    actions = workflow.add_subparsers(dest="action", required=True)
    p = actions.add_parser(
        "start", parents=[remote], help="start a workflow (with --id, the same command again finds it)"
    )
    p.add_argument("definition")
    p.add_argument("--version", type=int, required=True, help="the definition version to pin")
    p.add_argument("--input", type=json_argument, required=True, help="the workflow's input, JSON or @file.json")
    p.add_argument("--deadline-seconds", type=int, required=True, help="the whole workflow's deadline")
    p.add_argument("--id", dest="workflow_id", help="the workflow id (default: a new one; repeating with it is safe)")
    p.set_defaults(run=_command(workflow_start))
    p = actions.add_parser("list", parents=[remote], help="the namespace's workflows")
    p.add_argument("--status", choices=WORKFLOW_STATUSES)
    p.add_argument("--definition", help="only workflows of this definition")
    p.add_argument(
        "--correlation-key", metavar="KEY", help="only workflows with a wait or a signal of exactly this key"
    )
    p.add_argument("--id-prefix", metavar="TEXT", help="only workflows whose id starts with this text")
    p.set_defaults(run=_command(workflow_list))
    p = actions.add_parser("show", parents=[remote], help="status, steps, waits, tasks and signals")
    p.add_argument("workflow_id")
    p.set_defaults(run=_command(workflow_show))
    p = actions.add_parser("events", parents=[remote], help="the history, oldest first")
    p.add_argument("workflow_id")
    p.set_defaults(run=_command(workflow_events))
    p = actions.add_parser("export", parents=[remote], help="everything Weave holds of the workflow, as JSON (L2)")
    p.add_argument("workflow_id")
    p.add_argument("--output", help="write the document to this file (default: standard output)")
    p.set_defaults(run=_command(workflow_export))
    for action in ("pause", "resume", "cancel"):
        p = actions.add_parser(action, parents=[remote], help=f"{action} the workflow (R1)")
        p.add_argument("workflow_id")
        p.add_argument("--reason", required=True, help="why (audited)")
        p.set_defaults(run=_command(workflow_control))
    p = actions.add_parser(
        "review", parents=[remote], help="repair a workflow in NEEDS_REVIEW (R2), or give it a new deadline (R4)"
    )
    p.add_argument("workflow_id", nargs="?", help="the workflow (or --all)")
    p.add_argument("--action", dest="review_action", required=True, choices=REVIEW_ACTIONS)
    p.add_argument("--step", help="the step under review (retry_step, complete_step); with --all, only that step")
    p.add_argument(
        "--result", type=json_argument, default=sdk.ABSENT, help="complete_step: the step's result, JSON or @file"
    )
    p.add_argument(
        "--deadline-seconds", type=int, help="extend_deadline: the new total deadline, seconds from now (1 s-366 days)"
    )
    p.add_argument("--reason", required=True, help="why (audited)")
    bulk = p.add_argument_group("many at once: every workflow the filters list, each reviewed on its own")
    bulk.add_argument("--all", action="store_true", help="instead of one workflow id")
    bulk.add_argument("--status", choices=WORKFLOW_STATUSES, default="NEEDS_REVIEW", help="(default NEEDS_REVIEW)")
    bulk.add_argument("--definition", help="only workflows of this definition")
    bulk.add_argument(
        "--reason-code", metavar="CODE", help="only workflows in review for this reason (TASK_FAILED, ...)"
    )
    bulk.add_argument("--dry-run", action="store_true", help="say what would be done, do nothing")
    p.set_defaults(run=_review_command(p))

    signal = commands.add_parser("signal", help="send and read signals through the API")
    actions = signal.add_subparsers(dest="action", required=True)
    p = actions.add_parser("send", parents=[remote], help="send a signal (safe to repeat with --idempotency-key)")
    p.add_argument("workflow_id")
    p.add_argument("--step", required=True, help="target step key")
    p.add_argument("--sequence", type=_positive, default=1, help="target activation sequence (default 1)")
    _fact_arguments(p)
    p.set_defaults(run=_command(signal_send))
    p = actions.add_parser(
        "route", parents=[remote], help="send a fact by its business key: Weave finds the workflow that waits for it"
    )
    p.add_argument("--park-seconds", type=_positive, help="how long it waits for its wait to open (default a day)")
    _fact_arguments(p)
    p.set_defaults(run=_command(signal_route))
    p = actions.add_parser(
        "send-batch", parents=[remote], help="send up to 100 signals from a JSON lines file, one answer line each"
    )
    p.add_argument("items", metavar="FILE", type=batch_items, help="JSON lines, one signal body each; - for stdin")
    p.set_defaults(run=_command(signal_send_batch))
    p = actions.add_parser("list", parents=[remote], help="a workflow's signals with their dispositions")
    p.add_argument("workflow_id")
    p.add_argument("--status", choices=SIGNAL_STATUSES)
    p.set_defaults(run=_command(signal_list))
    p = actions.add_parser(
        "show",
        parents=[remote],
        help="a signal's current state; with a signal id alone, a fact sent by `route`, wherever it is",
        usage="%(prog)s [-h] [ID] SIGNAL_ID [--wait-seconds S] ...",
    )
    p.add_argument("workflow_id", metavar="ID", help="the workflow; left out for a fact sent by `route`")
    p.add_argument("signal_id", metavar="SIGNAL_ID", nargs="?")
    p.add_argument(
        "--wait-seconds",
        type=_wait_seconds,
        default=0,
        help="wait up to this long (0-20) for a PENDING or PARKED signal to settle",
    )
    p.set_defaults(run=_command(signal_show))
