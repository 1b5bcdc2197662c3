"""D2 without a database: a correlation is an RFC 6901 JSON Pointer into the instance context and must
give a string of 1-512 UTF-8 bytes."""

import pytest

from weave.rules.correlation import Unresolved, correlation_key, resolve

ITEMS = [f"i{n}" for n in range(11)]
CONTEXT = {
    "workflow_id": "wf-1",
    "input": {
        "order_id": "o-1",
        "a/b": "slash",
        "m~n": "tilde",
        "~1": "tilde-one",
        "": "empty-key",
        "items": ITEMS,
        "nothing": None,
        "n": 7,
        "flag": False,
        "nested": {"deep": ["x", {"k": "v"}]},
    },
    "steps": {"reserve": {"result": {"reservation_id": "r-9"}}},
}


@pytest.mark.parametrize(
    "pointer, value",
    [
        ("", CONTEXT),
        ("/workflow_id", "wf-1"),
        ("/input/order_id", "o-1"),
        ("/steps/reserve/result/reservation_id", "r-9"),
        ("/input/a~1b", "slash"),
        ("/input/m~0n", "tilde"),
        ("/input/~01", "tilde-one"),
        ("/input/", "empty-key"),
        ("/input/items", ITEMS),
        ("/input/items/0", "i0"),
        ("/input/items/10", "i10"),
        ("/input/nested/deep/1/k", "v"),
        ("/input/nothing", None),
        ("/input/flag", False),
    ],
    ids=[
        "d2_empty_pointer_is_the_whole_context",
        "d2_workflow_id",
        "d2_input_member",
        "d2_step_result",
        "d2_tilde_one_is_a_slash",
        "d2_tilde_zero_is_a_tilde",
        "d2_tilde_zero_one_is_tilde_one_not_slash",
        "d2_empty_member_name",
        "d2_array_itself",
        "d2_array_index_0",
        "d2_array_index_10",
        "d2_objects_and_arrays_nest",
        "d2_present_null_is_a_value",
        "d2_false_is_a_value",
    ],
)
def test_d2_resolve(pointer, value):
    assert resolve(CONTEXT, pointer) == value


@pytest.mark.parametrize(
    "pointer",
    [
        "/input/missing",
        "/Input/order_id",
        "/input/a/b",
        "/input/items/01",
        "/input/items/00",
        "/input/items/-",
        "/input/items/11",
        "/input/items/-1",
        "/input/items/+1",
        "/input/items/x",
        "/input/items/",
        "/input/order_id/0",
        "/input/n/0",
        "/input/nothing/x",
        "/input/flag/x",
        "/steps/ship/result",
    ],
    ids=[
        "d2_missing_member",
        "d2_member_names_are_case_sensitive",
        "d2_unescaped_slash_is_two_tokens",
        "d2_leading_zero_index",
        "d2_double_zero_index",
        "d2_dash_is_past_the_end",
        "d2_index_equal_to_length",
        "d2_negative_index",
        "d2_signed_index",
        "d2_non_numeric_index",
        "d2_empty_index",
        "d2_cannot_descend_into_a_string",
        "d2_cannot_descend_into_a_number",
        "d2_cannot_descend_into_null",
        "d2_cannot_descend_into_a_boolean",
        "d2_step_without_result_yet",
    ],
)
def test_d2_unresolvable_pointer(pointer):
    with pytest.raises(Unresolved):
        resolve(CONTEXT, pointer)


# RFC 6901 array-index = %x30 / ( %x31-39 *(%x30-39) ): ASCII digits only. The definition schema's
# pointer pattern lets any other character through, so these reach the rule ('²' used to raise a
# plain ValueError, which activation does not catch).
@pytest.mark.parametrize(
    "pointer",
    ["/input/items/\u0661", "/input/items/\u00b2", "/input/items/\uff11"],
    ids=[
        "d2_arabic_indic_digit_is_not_an_index",
        "d2_superscript_two_is_not_an_index",
        "d2_fullwidth_digit_is_not_an_index",
    ],
)
def test_d2_only_ascii_digits_index_an_array(pointer):
    with pytest.raises(Unresolved):
        resolve(CONTEXT, pointer)


def context_with(value) -> dict:
    return {"workflow_id": "wf-1", "input": {"key": value}, "steps": {}}


@pytest.mark.parametrize(
    "value, key",
    [
        ("o-1", b"o-1"),
        ("o-1 ", b"o-1 "),
        ("a", b"a"),
        ("x" * 512, b"x" * 512),
        ("\u00e9" * 256, "\u00e9".encode() * 256),
        ("\U0001f600" * 128, "\U0001f600".encode() * 128),
    ],
    ids=[
        "d2_string_gives_its_utf8_bytes",
        "d2_trailing_space_kept",
        "d2_one_byte",
        "d2_512_bytes",
        "d2_512_bytes_of_two_byte_characters",
        "d2_512_bytes_of_four_byte_characters",
    ],
)
def test_d2_correlation_key(value, key):
    assert correlation_key(context_with(value), "/input/key") == key


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x" * 513,
        "\u00e9" * 256 + "x",
        "\u20ac" * 171,
        None,
        7,
        True,
        ["o-1"],
        {"id": "o-1"},
    ],
    ids=[
        "d2_zero_bytes",
        "d2_513_bytes",
        "d2_513_bytes_in_257_characters",
        "d2_513_bytes_in_171_characters",
        "d2_null",
        "d2_number",
        "d2_boolean",
        "d2_array",
        "d2_object",
    ],
)
def test_d2_unusable_correlation_key(value):
    with pytest.raises(Unresolved):
        correlation_key(context_with(value), "/input/key")


def test_d2_missing_correlation_key_is_unresolved():
    with pytest.raises(Unresolved, match="no member 'order_id'"):
        correlation_key(context_with("o-1"), "/input/order_id")
