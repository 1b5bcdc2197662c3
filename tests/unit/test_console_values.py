"""Stored values as the console shows them (weave/console/values.py), without a database: laid out,
escaped, and bounded in bytes and in work whatever the value (issue 26, item 1)."""

from __future__ import annotations

import html
import json
import time

import pytest

from weave import jsontext
from weave.console import values


def shown_text(text: str, budget: int = values.VALUE_BYTES, laid_out: bool = True) -> values.Shown:
    return values.show(text, len(text.encode()), budget, laid_out)


def unescaped(shown: values.Shown) -> str:
    return html.unescape(str(shown.html))


@pytest.mark.parametrize(
    "text",
    [
        '{"a":1,"b":[true,{}],"c":{"d":null,"e":"x"}}',
        '{"s":"a, b: {c} [d] \\"e\\" \\\\","n":-1.5E+10}',
        "[]",
        '"just a string, with: {brackets}"',
        "123456789012345678901234567890.000",
        "[" * 30 + "1" + "]" * 30,  # deeper than DEPTH: the rest stays on its line
    ],
)
def test_only_white_space_is_added_outside_strings(text):
    shown = shown_text(text)
    assert not shown.cut
    assert jsontext.compact(jsontext.loads(unescaped(shown))) == text  # nothing but layout changed


def test_one_member_per_line_two_spaces_a_level():
    assert unescaped(shown_text('{"a":1,"b":[true,{}]}')) == '{\n  "a": 1,\n  "b": [\n    true,\n    {}\n  ]\n}'


def test_levels_below_the_depth_cap_stay_on_their_line():
    text = "[" * 500 + ",".join(["0"] * 1000) + "]" * 500
    lines = unescaped(shown_text(text, budget=10**6)).split("\n")
    assert max(len(line) - len(line.lstrip(" ")) for line in lines) == 2 * values.DEPTH
    assert len(lines) == 2 * values.DEPTH + 1  # DEPTH levels open, one line for the rest, DEPTH close


WORST = [
    "[" * 100_000 + "]" * 100_000,  # deep
    "[" + ",".join(["0"] * 500_000) + "]",  # many items
    '{"a":"' + "x" * 1_000_000 + '"}',  # a huge string
    "9" * 1_000_000,  # a huge number (more than Weave keeps: any text is shown as text)
    '["' + '\\"<&>' * 200_000 + '"]',  # quotes and what HTML escapes
    '["' + "\u202e\U000f0000" * 200_000 + '"]',  # what is escaped, astral and all
]


@pytest.mark.parametrize("text", WORST, ids=["deep", "items", "string", "number", "escaped", "unsafe"])
def test_the_output_fits_its_budget_and_the_work_does_not_grow_with_the_value(text):
    started = time.process_time()
    for _ in range(20):
        shown = shown_text(text)
    per_show = (time.process_time() - started) / 20
    assert shown.cut and str(shown.html).endswith(values.ELLIPSIS)
    assert len(shown.html.encode()) <= values.VALUE_BYTES
    assert len(shown.html.encode()) > values.VALUE_BYTES - 64  # cut at the budget, not far below it
    # A few thousand characters read, whatever the value's size (a whole pass over a
    # million-character text takes far longer than this).
    assert per_show < 0.01, per_show


def test_characters_that_could_hide_or_reorder_text_become_json_escapes_of_the_same_value():
    value = {"note": "pay \u202eevil\u202c now", "esc": "\x1b[31m", "nul": "\x00", "pua": "\U000f0001"}
    text = jsontext.compact(value).replace("\\u001b", "\x1b")  # a raw ESC, as a legacy row may hold
    shown = unescaped(shown_text(text))
    assert not any(values.logs.is_unsafe(char) for char in shown.replace("\n", ""))
    assert "\\u202e" in shown and "\\u001b" in shown and "\\u0000" in shown and "\\udb80\\udc01" in shown
    assert json.loads(shown) == value


def test_html_is_escaped_as_jinja_escapes_it():
    assert str(shown_text("[\"<a href='x'>&\"]", laid_out=False).html) == "[&#34;&lt;a href=&#39;x&#39;&gt;&amp;&#34;]"


def test_a_value_that_fits_is_not_cut_and_one_whose_head_is_all_there_is_says_its_size():
    assert not shown_text('{"a":1}').cut
    head = values.show('{"a":', 1000, values.VALUE_BYTES)  # only the first characters were read
    assert head.cut and head.total_bytes == 1000 and str(head.html).endswith(values.ELLIPSIS)


def test_a_pages_values_share_its_budget_in_the_order_they_are_shown():
    budget = values.Budget(10_000)
    text = "[" + ",".join(["1"] * 10_000) + "]"
    shown = [budget.show(text, len(text)) for _ in range(4)]
    sizes = [len(s.html.encode()) for s in shown]
    assert all(values.VALUE_BYTES - 64 < size <= values.VALUE_BYTES for size in sizes[:2])
    assert 0 < sizes[2] <= 10_000 - sizes[0] - sizes[1] and shown[2].cut
    assert str(shown[3].html) == "" and shown[3].cut and shown[3].total_bytes == len(text)  # the note alone
    assert budget.show(None, 0) == values.Shown(values.Markup(""), False, 0)  # no value: nothing spent


def test_clip_keeps_short_text_and_cuts_long_text_with_an_ellipsis():
    assert values.clip("abc", 3) == "abc"
    assert values.clip("abcd", 3) == "abc…"
