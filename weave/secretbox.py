"""The key ring that encrypts the inbound sources' secrets at rest (docs/rules.md#webhooks, W1).

A signature can only be checked with the secret itself, so a secret cannot be stored as a hash the
way a token is: it is stored encrypted (Fernet: AES-128-CBC with HMAC-SHA256, a random IV per
secret) with a key that only the environment holds, `WEAVE_SECRET_KEY`. A copy of the database
alone (a backup, a replica, a dump) then holds no usable secret.

The variable holds one or more keys separated by commas: the first encrypts, every one decrypts.
Rotation puts a new key first and keeps the old one after it until every stored secret has been
encrypted again with the new one (`weave admin inbound secret reencrypt`; docs/operations.md,
"The secret key").
"""

from __future__ import annotations

import binascii
import os
from collections.abc import Mapping, Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

SECRET_KEY_VARIABLE = "WEAVE_SECRET_KEY"
HOW_TO_MAKE_ONE = "32 random bytes in url-safe base64, as `weave admin secret-key` prints one"


class Keyring:
    """Fernet keys: `encrypt` with the first, `decrypt` with whichever opens the token."""

    def __init__(self, keys: Sequence[str]):
        if not keys:
            raise ValueError(f"{SECRET_KEY_VARIABLE} holds no key: {HOW_TO_MAKE_ONE}")
        fernets = []
        for position, key in enumerate(keys, start=1):
            try:
                fernets.append(Fernet(key.strip()))
            except (ValueError, binascii.Error):
                # The message never repeats the key: it is a secret too.
                raise ValueError(
                    f"{SECRET_KEY_VARIABLE}: key {position} of {len(keys)} is not a Fernet key ({HOW_TO_MAKE_ONE})"
                ) from None
        self._fernet = MultiFernet(fernets)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Keyring | None":
        """The ring the environment holds; None when the variable is unset or empty; ValueError
        when a key in it is malformed (an empty item between commas included)."""
        text = environ.get(SECRET_KEY_VARIABLE, "").strip()
        if not text:
            return None
        return cls(text.split(","))

    def encrypt(self, secret: str) -> bytes:
        return self._fernet.encrypt(secret.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        """The secret; ValueError when no key of the ring opens the token (it was encrypted with a
        key the variable no longer holds, or it was altered)."""
        try:
            return self._fernet.decrypt(bytes(token)).decode("utf-8")
        except InvalidToken:
            raise ValueError(f"no key of {SECRET_KEY_VARIABLE} decrypts this stored secret") from None

    def rotate(self, token: bytes) -> bytes:
        """The same secret encrypted with the first key (rotation: nothing stored then needs the
        keys after it); ValueError like `decrypt`."""
        try:
            return self._fernet.rotate(bytes(token))
        except InvalidToken:
            raise ValueError(f"no key of {SECRET_KEY_VARIABLE} decrypts this stored secret") from None


def new_key() -> str:
    """A new key, as `weave admin secret-key` prints it."""
    return Fernet.generate_key().decode("ascii")
