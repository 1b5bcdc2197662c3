"""`weave definition …`: publish, list and read definitions through the API (D1, D5), on `weave.sdk`.

    weave definition publish FILE            FILE: a definition document (JSON), `-` for standard input
    weave definition list [--name NAME]      the newest version of each name
    weave definition show NAME [--version N] its steps and input schema (default: the newest version)

The server, token and namespace come from the same places as for `weave workflow` (`client`).
docs/definitions.md says how to write the document.
"""

from __future__ import annotations

import argparse

from weave import sdk
from weave.cli.client import _cell, _command, _positive, _print_json, _time, json_argument, remote_arguments, table

DIGEST_SHOWN = 12  # hex digits of a digest in tables: enough to tell versions apart


def definition_publish(client: sdk.Client, args) -> None:
    definition = client.publish_definition(args.document)
    if args.json:
        _print_json(definition.raw)
        return
    outcome = "published" if definition.created else "identical to the latest version: nothing published"
    print(f"definition {definition.name} v{definition.version}: {outcome}, digest {definition.digest}")


def definition_list(client: sdk.Client, args) -> None:
    definitions = list(client.list_definitions(name=args.name))
    if args.json:
        _print_json({"definitions": [d.raw for d in definitions]})
        return
    rows = [[d.name, str(d.version), _time(d.created_at), d.digest[:DIGEST_SHOWN]] for d in definitions]
    print(table(["NAME", "VERSION", "PUBLISHED", "DIGEST"], rows) if rows else "no definitions")


def definition_show(client: sdk.Client, args) -> None:
    version = args.version
    if version is None:  # the newest: one list entry
        newest = next(client.list_definitions(name=args.name, page_size=1), None)
        if newest is None:
            raise sdk.DefinitionNotFound("DEFINITION_NOT_FOUND", 404, f"definition {args.name!r} has no version")
        version = newest.version
    definition = client.get_definition(args.name, version)
    if args.json:
        _print_json(definition.raw)
        return
    document = definition.document
    print(f"definition {definition.name} v{definition.version}, published {_time(definition.created_at)}")
    print(f"digest {definition.digest}")
    print(f"input schema {_cell(document['input_schema']) if 'input_schema' in document else '(none: any input)'}")
    print()
    print(
        table(["STEP", "TYPE", "QUEUE", "TIMEOUT", "ATTEMPTS", "EVERY", "SIGNAL", "CORRELATION"], _step_rows(document))
    )


def _step_rows(document: dict) -> list[list]:
    rows = []
    for step in document["steps"]:
        contract = step.get("signal") or step.get("final_signal")
        rows.append(
            [
                step["key"],
                step["type"],
                step.get("queue"),
                f"{step['timeout_seconds']}s",
                str(step["max_attempts"]) if "max_attempts" in step else None,
                f"{step['interval_seconds']}s" if "interval_seconds" in step else None,
                f"{contract['name']} {contract['payload_version']}" if contract else None,
                step.get("correlation"),
            ]
        )
    return rows


def _document(path: str):
    """A definition document from FILE (`-`: standard input)."""
    return json_argument("@" + path)


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add `definition` to the `weave` command's subcommands."""
    remote = remote_arguments()
    definition = commands.add_parser("definition", help="publish, list and read definitions through the API")
    actions = definition.add_subparsers(dest="action", required=True)
    p = actions.add_parser(
        "publish", parents=[remote], help="publish a definition (a document identical to the latest is that version)"
    )
    p.add_argument("document", type=_document, metavar="FILE", help="the definition (JSON); - reads standard input")
    p.set_defaults(run=_command(definition_publish))
    p = actions.add_parser("list", parents=[remote], help="the newest version of each definition")
    p.add_argument("--name", help="only this definition")
    p.set_defaults(run=_command(definition_list))
    p = actions.add_parser("show", parents=[remote], help="a definition's steps and input schema")
    p.add_argument("name")
    p.add_argument("--version", type=_positive, help="the version (default: the newest)")
    p.set_defaults(run=_command(definition_show))
