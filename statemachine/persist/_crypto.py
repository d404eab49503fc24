"""Encryption at rest for checkpoints: AES-256-GCM with key ids, so keys can rotate.

A sealed checkpoint is one self-describing blob::

    version (1 byte, 1) | key id length (1 byte) | key id (UTF-8) | nonce (12 bytes)
    | ciphertext and 16-byte tag

The header (version and key id) and the caller's ``aad`` (say, the run id and the
checkpoint's sequence number) are authenticated with the ciphertext, so a blob moved to
another run or another position, or altered in any byte, is refused
(:class:`CheckpointTamperedError`), never decrypted into something else. New blobs are
sealed with the ``current`` key; :meth:`CheckpointCipher.open` uses the key the blob
names, so checkpoints sealed before a rotation stay readable while their key is
configured.

The cipher is AES-GCM from ``cryptography`` (a well-kept library), not hand-written.
Nonces are random (96 bits): one key may seal about 2**32 blobs before a nonce is
likely to repeat, so rotate keys well before that.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

from .._errors import (
    CheckpointCorruptError,
    CheckpointKeyError,
    CheckpointTamperedError,
    SetupError,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# ``cryptography`` is imported where a key is made or used, not at the top: the CLI and
# the worker import this module whether or not checkpoints are sealed.

__all__ = ["CheckpointCipher", "generate_key"]

FORMAT_VERSION: Final = 1
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16
ENV_VAR: Final = "STATEMACHINE_CHECKPOINT_KEYS"
# Printable, and free of the separators of the environment form ("id:key,id:key").
_KEY_ID = re.compile(r"[A-Za-z0-9._-]{1,64}\Z")


def generate_key() -> bytes:
    """A new random 256-bit key; store it base64-encoded (``base64.b64encode(key)``)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM.generate_key(bit_length=256)


def _check_key_id(key_id: object) -> str:
    if not (isinstance(key_id, str) and _KEY_ID.match(key_id)):
        raise SetupError(
            f"checkpoint key id {key_id!r} is not allowed; use 1 to 64 letters, digits, "
            "'.', '_' or '-' (for example 'k2025-01')"
        )
    return key_id


@final
class CheckpointCipher:
    """Seals and opens checkpoints with AES-256-GCM; ``keys`` by id, ``current`` seals.

    Keep every key that sealed a checkpoint still kept in ``keys``; after a rotation,
    ``current`` names the new key and the old ones only open.
    """

    __slots__ = ("_aead", "_current")

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        aead: dict[str, AESGCM] = {}
        for key_id, key in keys.items():
            _check_key_id(key_id)
            raw: object = key  # checked at run time too: keys often come from config
            if not isinstance(raw, bytes | bytearray) or len(raw) != KEY_BYTES:
                size = f"{len(raw)} bytes" if isinstance(raw, bytes | bytearray) else "not bytes"
                raise SetupError(
                    f"checkpoint key {key_id!r} is {size}; AES-256-GCM keys are exactly "
                    f"{KEY_BYTES} bytes (make one with statemachine.generate_key())"
                )
            aead[key_id] = AESGCM(bytes(key))
        if current not in aead:
            listed = ", ".join(repr(k) for k in aead) or "(none)"
            raise SetupError(
                f"the current checkpoint key {current!r} is not among the keys given "
                f"({listed}); add it, or name one of those as current"
            )
        self._aead = aead
        self._current = current

    def __repr__(self) -> str:
        # Never the key material: only the ids.
        return f"CheckpointCipher(keys={sorted(self._aead)!r}, current={self._current!r})"

    @property
    def current(self) -> str:
        """The id of the key that seals new checkpoints."""
        return self._current

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of every configured key (each can open what it sealed)."""
        return tuple(self._aead)

    @classmethod
    def from_env(
        cls, var: str = ENV_VAR, *, environ: Mapping[str, str] | None = None
    ) -> CheckpointCipher:
        """The cipher configured by the environment variable ``var``.

        The value is ``id1:base64key,id2:base64key``; the first key is current, the
        others are older keys kept so their checkpoints stay readable. Error messages
        name entries and key ids, never key material.
        """
        value = (os.environ if environ is None else environ).get(var, "")
        if not value.strip():
            raise SetupError(
                f"{var} is not set; set it to id:base64key (comma-separated, the current key "
                "first), e.g. from base64.b64encode(statemachine.generate_key())"
            )
        keys: dict[str, bytes] = {}
        for position, entry in enumerate(value.split(","), 1):
            key_id, colon, encoded = entry.strip().partition(":")
            if not colon or not key_id:
                raise SetupError(
                    f"{var}: entry {position} is not id:base64key; write each key as its id, "
                    "a colon and the base64 key, separated by commas"
                )
            _check_key_id(key_id)
            if key_id in keys:
                raise SetupError(f"{var}: key id {key_id!r} appears twice; key ids are unique")
            try:
                key = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                raise SetupError(
                    f"{var}: the key of {key_id!r} (entry {position}) is not valid base64"
                ) from None
            if len(key) != KEY_BYTES:
                raise SetupError(
                    f"{var}: the key of {key_id!r} (entry {position}) is {len(key)} bytes; "
                    f"AES-256-GCM keys are exactly {KEY_BYTES} bytes"
                )
            keys[key_id] = key
        return cls(keys, current=next(iter(keys)))

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Encrypt ``plaintext`` with the current key, bound to ``aad``; a new nonce each time."""
        header = _header(self._current)
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead[self._current].encrypt(nonce, plaintext, header + aad)
        return header + nonce + sealed

    def open(self, blob: bytes, *, aad: bytes, run_id: str | None = None) -> bytes:
        """Decrypt ``blob`` with the key it names; refuse it if any byte or ``aad`` differs.

        ``aad`` must be exactly what ``seal`` was given. ``run_id`` only names the run
        in error messages.
        """
        blob = bytes(blob)
        if len(blob) < 2:
            raise CheckpointCorruptError(
                f"the sealed checkpoint is {len(blob)} byte(s), too short to hold a header; "
                "it was truncated or is not a sealed checkpoint",
                run_id=run_id,
            )
        if blob[0] != FORMAT_VERSION:
            raise CheckpointCorruptError(
                f"the sealed checkpoint has format version {blob[0]}, and this library reads "
                f"version {FORMAT_VERSION}; it is damaged, not a sealed checkpoint, or from a "
                "newer version of statemachine",
                run_id=run_id,
            )
        end = 2 + blob[1]
        if blob[1] == 0 or len(blob) < end + NONCE_BYTES + TAG_BYTES:
            raise CheckpointCorruptError(
                f"the sealed checkpoint is {len(blob)} bytes, too short for its header, nonce "
                "and tag; it was truncated",
                run_id=run_id,
            )
        try:
            key_id = blob[2:end].decode("ascii")
        except UnicodeDecodeError:
            key_id = ""
        if not _KEY_ID.match(key_id):
            raise CheckpointCorruptError(
                "the sealed checkpoint's key id is not a key id; it is damaged or not a "
                "sealed checkpoint",
                run_id=run_id,
            )
        aead = self._aead.get(key_id)
        if aead is None:
            raise CheckpointKeyError(key_id, self.key_ids, run_id=run_id)
        from cryptography.exceptions import InvalidTag

        nonce = blob[end : end + NONCE_BYTES]
        try:
            return aead.decrypt(nonce, blob[end + NONCE_BYTES :], blob[:end] + aad)
        except InvalidTag:
            raise CheckpointTamperedError(
                f"the sealed checkpoint (key {key_id!r}) failed authentication: it was altered, "
                "its key is not the one that sealed it, or it is being opened for another run "
                "or position (aad) than it was sealed for. Nothing was decrypted; restore it "
                "from a trusted copy",
                run_id=run_id,
            ) from None


def _header(key_id: str) -> bytes:
    encoded = key_id.encode("ascii")
    return bytes((FORMAT_VERSION, len(encoded))) + encoded
