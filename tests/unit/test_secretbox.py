"""W1: the key ring of WEAVE_SECRET_KEY that encrypts the inbound sources' secrets, without a database."""

import base64

import pytest

from weave.secretbox import SECRET_KEY_VARIABLE, Keyring, new_key

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_W1_a_new_key_is_32_random_bytes_in_url_safe_base64():
    key = new_key()
    assert len(base64.urlsafe_b64decode(key)) == 32
    assert key != new_key()


def test_W1_a_secret_comes_back_from_its_ciphertext_which_does_not_show_it():
    ring = Keyring([new_key()])
    token = ring.encrypt(SECRET)
    assert isinstance(token, bytes) and ring.decrypt(token) == SECRET
    for form in (SECRET.encode(), base64.b64encode(SECRET.encode()), SECRET.encode().hex().encode()):
        assert form not in token
    assert ring.encrypt(SECRET) != token  # a random IV each time: equal secrets do not look equal


def test_W1_unset_or_empty_variable_is_no_ring():
    assert Keyring.from_env({}) is None
    assert Keyring.from_env({SECRET_KEY_VARIABLE: ""}) is None
    assert Keyring.from_env({SECRET_KEY_VARIABLE: "  "}) is None


@pytest.mark.parametrize("value", ["not-a-key", "{key},", "{key},,{key}", base64.urlsafe_b64encode(b"short").decode()])
def test_W1_a_malformed_key_is_refused_without_repeating_it(value):
    text = value.format(key=new_key())
    with pytest.raises(ValueError) as refused:
        Keyring.from_env({SECRET_KEY_VARIABLE: text})
    message = str(refused.value)
    assert SECRET_KEY_VARIABLE in message and "weave admin secret-key" in message
    assert all(part not in message for part in text.split(",") if part)


def test_W1_rotation_the_first_key_encrypts_and_every_key_decrypts():
    old, new = new_key(), new_key()
    before = Keyring.from_env({SECRET_KEY_VARIABLE: old}).encrypt(SECRET)
    rotated = Keyring.from_env({SECRET_KEY_VARIABLE: f"{new}, {old}"})
    assert rotated.decrypt(before) == SECRET
    after = rotated.encrypt(SECRET)
    assert Keyring([new]).decrypt(after) == SECRET  # made with the new key alone
    with pytest.raises(ValueError, match=SECRET_KEY_VARIABLE):
        Keyring([old]).decrypt(after)


def test_W1_a_ciphertext_no_key_opens_or_an_altered_one_is_a_value_error():
    ring = Keyring([new_key()])
    token = ring.encrypt(SECRET)
    with pytest.raises(ValueError, match="no key of WEAVE_SECRET_KEY decrypts"):
        Keyring([new_key()]).decrypt(token)
    altered = token[:-2] + (b"A" if token[-2:-1] != b"A" else b"B") + token[-1:]
    with pytest.raises(ValueError):
        ring.decrypt(altered)


def test_W1_rotate_encrypts_again_with_the_first_key():
    old, new = new_key(), new_key()
    before = Keyring([old]).encrypt(SECRET)
    rotated = Keyring([new, old]).rotate(before)
    assert rotated != before and Keyring([new]).decrypt(rotated) == SECRET
    with pytest.raises(ValueError, match="no key of WEAVE_SECRET_KEY decrypts"):
        Keyring([new]).rotate(before)
