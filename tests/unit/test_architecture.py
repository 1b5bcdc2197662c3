"""The shape of `weave.sql` (issue 9): table modules are leaves under one engine, with no import
circle; the signal path is findable by name."""

from __future__ import annotations

import ast
from pathlib import Path

import weave.sql

SQL_DIR = Path(weave.sql.__file__).parent
ENGINE = "engine"
ENGINE_DIR = SQL_DIR / ENGINE


def _imports(path: Path) -> set[str]:
    """What `path` imports of `weave.sql`, as dotted names below it (`signals`, `engine.moves`,
    `instances.WorkflowFacts`), at any depth of its code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[:2] == ["weave", "sql"]:
            below = node.module.split(".")[2:]
            found |= {".".join([*below, alias.name]) for alias in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".", 2)[2] for a in node.names if a.name.startswith("weave.sql.")}
    return found


def sql_imports() -> dict[str, set[str]]:
    """module -> the `weave.sql` modules it imports; the engine package counts as one module."""
    graph = {path.stem: {n.split(".")[0] for n in _imports(path)} for path in SQL_DIR.glob("*.py")}
    graph.pop("__init__")
    graph[ENGINE] = {n.split(".")[0] for path in ENGINE_DIR.glob("*.py") for n in _imports(path)} - {ENGINE}
    return graph


def engine_imports() -> dict[str, set[str]]:
    """engine module -> the engine modules it imports."""
    return {
        path.stem: {n.split(".")[1] for n in _imports(path) if n.startswith(ENGINE + ".")}
        for path in ENGINE_DIR.glob("*.py")
        if path.stem != "__init__"
    }


def find_circle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path (`a -> b -> a`), or None."""
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":  # open modules are exactly those on `path`
                return path[path.index(imported) :] + [imported]
            if imported not in state:
                circle = visit(imported, path + [imported])
                if circle:
                    return circle
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            circle = visit(module, [module])
            if circle:
                return circle
    return None


def test_no_import_circle_among_sql_modules():
    assert find_circle(sql_imports()) is None


def test_no_import_circle_inside_the_engine_and_step_kinds_below_moves():
    """Issue 27: a step kind is a module that `moves` enters in its table; no kind imports `moves`
    or `units` (a kind returns an Outcome, `moves` applies it)."""
    graph = engine_imports()
    assert {"units", "moves", "task", "signal", "poll", "settle", "steps"} <= set(graph)
    assert find_circle(graph) is None
    for kind in ("task", "signal", "poll"):
        assert not graph[kind] & {"moves", "units"}, (kind, graph[kind])
    from weave.sql import engine

    assert set(engine.KINDS) == {"TASK", "SIGNAL", "POLL"}


def test_the_circle_finder_finds_a_circle():
    assert find_circle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_circle({"a": {"b"}, "b": set()}) is None


def test_table_modules_never_import_the_engine():
    graph = sql_imports()
    assert ENGINE in graph
    assert [module for module, imported in graph.items() if ENGINE in imported] == []


def test_the_scanner_and_the_resources_reach_the_engine_not_the_other_way_round():
    import weave.scanner
    from weave.resources import workflows
    from weave.sql import engine

    by_source = {source.name: source.process for source in weave.scanner.SOURCES}
    assert by_source["checkpoint"] is engine.process_checkpoint
    assert by_source["inbox"] is engine.consume_inbox_event
    assert "engine.control(" in Path(workflows.__file__).read_text()
    engine_source = "".join(path.read_text() for path in ENGINE_DIR.glob("*.py"))
    assert "weave.resources" not in engine_source and "weave.scanner" not in engine_source


def test_the_signal_path_is_named_in_the_package_docstring():
    doc = weave.sql.__doc__
    assert "signals.send_signal" in doc and "engine.consume_wait" in doc
    from weave.sql import engine, signals

    assert callable(signals.send_signal) and callable(engine.consume_wait)
