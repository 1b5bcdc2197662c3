"""The repository stands alone (issue 28): every rule id that the code, the SQL, the scripts, the
docs and the tests' names cite is defined in docs/rules.md, no file outside tests points at a
specification beside the checkout, and the relative links of README.md and docs/*.md lead to files
and anchors that exist. No database."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from weave import statuses
from weave.console.words import REVIEW_REASONS
from weave.errors import Code

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "setup.cfg").exists())
RULES = ROOT / "docs" / "rules.md"

# A rule id: a group letter and a number (D1, P7, K3, B8), S1 or S2 with an optional item (S1.10),
# C with an optional row of its table (C2.4). C0 (a block of control characters, weave/logs.py) is none.
RULE_ID = re.compile(r"\b(?:[DIPRKMBWNL][1-9]|S[12](?:\.[1-9][0-9]?)?|C[1-9](?:\.[1-9])?)\b")
# The same ids in a test's name: test_s2_4_…, test_C2_4_…, test_I6_…, test_r4_….
TEST_NAME_ID = re.compile(r"\bdef test_(?:([DIPRKMBWNLdiprkmbwnl][1-9])|([SCsc][1-9])(?:_([1-9][0-9]?))?)(?=_|\()")
ANCHOR = re.compile(r"""<a id="([^"]+)"></a>""")
DEFINED = re.compile(r"""<a id="([^"]+)"></a>\*\*([A-Z][0-9.]+)\*\*""")
CITES_A_SPEC_OUTSIDE = re.compile(rb"\.\./shared|shared/SPEC|SPEC\.md|SPEC \xc2\xa7")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def anchor_of(rule_id: str) -> str:
    return rule_id.lower().replace(".", "-")


def repository_files() -> list[Path]:
    """The repository's files (tracked, and new ones not ignored); the tree without .git."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        return [ROOT / name for name in listed if (ROOT / name).is_file()]
    except (OSError, subprocess.CalledProcessError):
        skipped = {"build", "dist", "node_modules", "__pycache__"}
        found = []
        for folder, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in skipped and not d.endswith(".egg-info")]
            found += [Path(folder) / f for f in files]
        return found


def cited_in(paths) -> dict[str, set[str]]:
    """rule id -> the files (relative to the root) that cite it."""
    cited: dict[str, set[str]] = {}
    for path in paths:
        for rule_id in RULE_ID.findall(path.read_text(errors="replace")):
            cited.setdefault(rule_id, set()).add(str(path.relative_to(ROOT)))
    return cited


def anchors() -> set[str]:
    return set(ANCHOR.findall(RULES.read_text()))


def section(title_anchor: str) -> str:
    """The text of docs/rules.md from the heading with `title_anchor` to the next heading."""
    text = RULES.read_text()
    start = text.index(f'<a id="{title_anchor}"></a>')
    end = text.find("\n## ", start)
    return text[start : end if end > 0 else len(text)]


def test_every_rule_has_one_anchor_spelt_from_its_id():
    text = RULES.read_text()
    all_anchors = ANCHOR.findall(text)
    assert len(all_anchors) == len(set(all_anchors)), "an anchor is defined twice"
    defined = DEFINED.findall(text)
    assert len(defined) > 60
    for anchor, rule_id in defined:
        assert anchor == anchor_of(rule_id), (anchor, rule_id)


@pytest.mark.parametrize("folder", ["weave", "sql", "docs", "scripts", "migrations"])
def test_every_rule_id_cited_in_the_tree_is_defined_in_docs_rules_md(folder):
    texts = [
        p
        for p in repository_files()
        if p.is_relative_to(ROOT / folder) and p.suffix in {".py", ".sql", ".md", ".json", ".html", ".txt", ""}
    ]
    if folder == "docs":
        texts += [ROOT / "README.md"]
    assert texts
    missing = {rule_id: files for rule_id, files in cited_in(texts).items() if anchor_of(rule_id) not in anchors()}
    assert not missing, f"cited but not in docs/rules.md: {missing}"


def test_every_rule_id_in_a_test_name_is_defined_in_docs_rules_md():
    names = set()
    for path in (ROOT / "tests").rglob("test_*.py"):
        for letter_number, section_number, item in TEST_NAME_ID.findall(path.read_text()):
            names.add((letter_number or section_number + (f".{item}" if item else "")).upper())
    assert {"S1.11", "C2.4", "P4", "R2"} <= names  # the pattern still reads the names
    assert not {n for n in names if anchor_of(n) not in anchors()}


def test_the_rule_ids_of_poll_decisions_are_defined():
    """The ids a POLL_DECIDED event stores as `rule` (weave/rules/poll.py decides them)."""
    source = (ROOT / "weave" / "rules" / "poll.py").read_text()
    recorded = set(re.findall(r'Decision\(\w+, "([A-Z0-9.]+)"', source))
    assert {"C1", "C2.1", "C2.4", "C2.7"} <= recorded
    assert {anchor_of(r) for r in recorded} <= anchors()


def test_the_statuses_review_reasons_and_problem_codes_are_in_docs_rules_md():
    listed = section("statuses")
    for enum in (
        statuses.InstanceStatus,
        statuses.Gate,
        statuses.ActivationStatus,
        statuses.WaitStatus,
        statuses.SignalStatus,
        statuses.Disposition,
        statuses.TaskStatus,
        statuses.InboxStatus,
        statuses.TaskOutcome,
        statuses.DeliveryOutcome,
    ):
        assert {str(s) for s in enum} <= set(re.findall(r"`([A-Z_]+)`", listed)), enum.__name__
    text = RULES.read_text()
    assert not {reason for reason in REVIEW_REASONS if f"`{reason}`" not in text}
    api = section("api")
    assert not {code.name for code in Code if f"`{code.name}`" not in api}


def test_nothing_outside_tests_cites_a_specification_beside_the_checkout():
    offending = [
        str(path.relative_to(ROOT))
        for path in repository_files()
        if path.relative_to(ROOT).parts[0] != "tests" and CITES_A_SPEC_OUTSIDE.search(path.read_bytes())
    ]
    assert not offending


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation dropped."""
    text = re.sub(r"<[^>]+>", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def targets_of(path: Path) -> set[str]:
    """The anchors a link may name in `path`: explicit ids and its headings' slugs."""
    text = path.read_text()
    found = set(re.findall(r"""\bid="([^"]+)\"""", text))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M):
        slug = github_slug(heading)
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


@pytest.mark.parametrize("doc", ["README.md", *sorted(p.name for p in (ROOT / "docs").glob("*.md"))])
def test_relative_links_lead_to_files_and_anchors_that_exist(doc):
    path = ROOT / doc if doc == "README.md" else ROOT / "docs" / doc
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in targets_of(linked):
            broken.append(target)
    assert not broken, f"{doc}: {broken}"
