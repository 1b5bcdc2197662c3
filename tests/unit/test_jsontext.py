"""S1.11 exactness of JSON, without a database."""

from decimal import Decimal

import pytest

from weave import jsontext


def test_s1_11_big_and_precise_decimals_survive_exactly():
    text = '{"amount":12345678901234567890.123456789012345678901,"tiny":1E-400,"int":123456789012345678901234567890}'
    value = jsontext.loads(text)
    assert value["amount"] == Decimal("12345678901234567890.123456789012345678901")
    assert isinstance(value["int"], int)
    assert jsontext.compact(value) == text


def test_s1_11_trailing_zeros_and_member_order_are_kept_in_compact_form():
    value = jsontext.loads('{ "b" : 1.10 , "a" : [ 1 , 2.50 ] }')
    assert jsontext.compact(value) == '{"b":1.10,"a":[1,2.50]}'
    assert jsontext.canonical(value) == '{"a":[1,2.50],"b":1.10}'


def test_s1_11_digest_ignores_member_order_but_not_values():
    assert jsontext.digest(jsontext.loads('{"a":1,"b":2}')) == jsontext.digest(jsontext.loads('{"b":2,"a":1}'))
    assert jsontext.digest(jsontext.loads('{"a":1.0}')) != jsontext.digest(jsontext.loads('{"a":1}'))
    assert jsontext.digest(None) != jsontext.digest("null")


@pytest.mark.parametrize(
    "text, reason",
    [
        ('{"a":1,"a":2}', "duplicate object key"),
        ('{"x":{"a":1,"a":1}}', "duplicate object key"),
        ("NaN", "NaN"),
        ("[Infinity]", "Infinity"),
        ("-Infinity", "Infinity"),
        ('"\\ud800"', "surrogate"),
        ("{", "Expecting"),
        ("1 2", "Extra data"),
        ("", "Expecting value"),
        ("[" * 100000 + "]" * 100000, "nested too deeply"),
    ],
)
def test_s1_11_refused_json(text, reason):
    with pytest.raises(jsontext.JsonRejected, match=reason):
        jsontext.loads(text)


def test_body_that_is_not_utf8_is_refused():
    with pytest.raises(jsontext.JsonRejected, match="not UTF-8"):
        jsontext.loads(b'"\xff"')


@pytest.mark.parametrize("number", ["9" * 1000, "-" + "9" * 999, "0." + "1" * 998])
def test_numbers_up_to_the_bound_stay_exact(number):
    assert jsontext.compact(jsontext.loads(number)) == number
    assert jsontext.compact(jsontext.loads(f'{{"n":[{number}]}}')) == f'{{"n":[{number}]}}'


@pytest.mark.parametrize("number", ["9" * 1001, "-" + "9" * 1000, "0." + "1" * 999, "9" * 4301, "1" * 997 + "e-10"])
def test_issue_10_11_numbers_longer_than_the_bound_are_refused(number):
    with pytest.raises(jsontext.NumberTooLong, match="at most 1000"):
        jsontext.loads(f'{{"n":{number}}}')


def test_non_ascii_is_written_as_utf8_and_pairs_survive():
    assert jsontext.compact(jsontext.loads('"\\ud83d\\ude00 é"')) == '"😀 é"'


def test_raw_text_is_embedded_as_is():
    assert jsontext.compact({"a": jsontext.Raw('{"z":1.50}')}) == '{"a":{"z":1.50}}'


WRITTEN = [
    None,
    True,
    False,
    0,
    -5,
    2**70,
    1.5,
    1e300,
    -0.0,
    Decimal("1.50"),
    Decimal("1E+5"),
    Decimal("-0.0"),
    'a\u00e9"\n\t\\\u2028\U0001f600',
    jsontext.Raw('{"x":1}'),
    {"b": 1, "a": [1, 2, {"z": None, "y": jsontext.Raw("[1]")}], "\u00e9": "\u00fc", "": ""},
    (1, "2", [3]),
    [],
    {},
]


@pytest.mark.parametrize("value", WRITTEN)
def test_the_c_encoder_writes_what_the_python_writer_writes(value):
    """compact() and canonical() go through the json module's C encoder (issue 31 item 4): the
    same text as `_write`, member by member, Raw and Decimal included."""
    for sort_keys, written in ((False, jsontext.compact), (True, jsontext.canonical)):
        out: list[str] = []
        jsontext._write(value, out, sort_keys)
        assert written(value) == "".join(out)


@pytest.mark.parametrize(
    "value, error", [(float("nan"), ValueError), (Decimal("NaN"), jsontext.JsonRejected), ({1}, TypeError)]
)
def test_the_c_encoder_refuses_what_the_python_writer_refuses(value, error):
    with pytest.raises(error):
        jsontext._write(value, [], False)
    with pytest.raises(error):
        jsontext.compact([value])
