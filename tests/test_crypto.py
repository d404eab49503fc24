"""persist._crypto: sealed checkpoints open only whole, with their key and their aad."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import exactly

from statemachine import (
    CheckpointCipher,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointKeyError,
    CheckpointTamperedError,
    SetupError,
    generate_key,
)

K1 = bytes(range(32))
K2 = bytes(range(32, 64))
AAD = b"run-1/7"


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_seal_then_open_gives_the_plaintext_back() -> None:
    """A round trip with the current key; each seal uses a new nonce."""
    cipher = CheckpointCipher({"k1": K1}, current="k1")
    blob = cipher.seal(b'{"kind":"Planning"}', aad=AAD)
    assert cipher.open(blob, aad=AAD) == b'{"kind":"Planning"}'
    assert cipher.seal(b"same", aad=AAD) != cipher.seal(b"same", aad=AAD)


def test_the_blob_names_its_format_and_key() -> None:
    """Version byte, key id, 12-byte nonce, then ciphertext and a 16-byte tag."""
    blob = CheckpointCipher({"k1": K1}, current="k1").seal(b"abc", aad=AAD)
    assert blob[:4] == b"\x01\x02k1"
    assert len(blob) == 4 + 12 + 3 + 16
    assert b"abc" not in blob


def test_rotation_keeps_old_checkpoints_readable() -> None:
    """Sealed with k1, then k2 becomes current: both open, and new blobs use k2."""
    old = CheckpointCipher({"k1": K1}, current="k1").seal(b"before", aad=AAD)
    rotated = CheckpointCipher({"k1": K1, "k2": K2}, current="k2")
    new = rotated.seal(b"after", aad=AAD)
    assert new[2:4] == b"k2"
    assert rotated.open(old, aad=AAD) == b"before"
    assert rotated.open(new, aad=AAD) == b"after"


def test_an_unknown_key_id_says_which_key_to_add() -> None:
    """A blob sealed with a key that is no longer configured names that key."""
    blob = CheckpointCipher({"k1": K1}, current="k1").seal(b"x", aad=AAD)
    with pytest.raises(
        CheckpointKeyError,
        match=exactly(
            "checkpoint of run 'run-1': it was sealed with key id 'k1', which is not configured "
            "(configured: 'k2'). Add the key 'k1' to the checkpoint keys; keep retired keys "
            "configured until no checkpoint sealed with them remains."
        ),
    ) as raised:
        CheckpointCipher({"k2": K2}, current="k2").open(blob, aad=AAD, run_id="run-1")
    assert raised.value.key_id == "k1"
    assert raised.value.run_id == "run-1"
    assert isinstance(raised.value, LookupError)


TAMPERED = (
    "checkpoint: the sealed checkpoint (key 'k1') failed authentication: it was altered, its "
    "key is not the one that sealed it, or it is being opened for another run or position "
    "(aad) than it was sealed for. Nothing was decrypted; restore it from a trusted copy"
)


def test_a_wrong_aad_is_refused() -> None:
    """A checkpoint moved to another run or sequence number does not open."""
    cipher = CheckpointCipher({"k1": K1}, current="k1")
    blob = cipher.seal(b"x", aad=b"run-1/7")
    for aad in (b"run-2/7", b"run-1/8", b""):
        with pytest.raises(CheckpointTamperedError, match=exactly(TAMPERED)):
            cipher.open(blob, aad=aad)


def test_a_wrong_key_under_the_same_id_is_refused() -> None:
    """Same id, other key material: authentication fails, nothing is returned."""
    blob = CheckpointCipher({"k1": K1}, current="k1").seal(b"x", aad=AAD)
    with pytest.raises(CheckpointTamperedError, match=exactly(TAMPERED)):
        CheckpointCipher({"k1": K2}, current="k1").open(blob, aad=AAD)


def test_every_flipped_byte_is_detected() -> None:
    """Header, nonce, ciphertext or tag: a change anywhere is refused."""
    cipher = CheckpointCipher({"k1": K1}, current="k1")
    blob = cipher.seal(b"the customer's words", aad=AAD)
    for index in range(len(blob)):
        changed = bytearray(blob)
        changed[index] ^= 0x01
        with pytest.raises(CheckpointError):
            cipher.open(bytes(changed), aad=AAD)


@pytest.mark.parametrize(
    ("blob", "message"),
    [
        (
            b"",
            "checkpoint: the sealed checkpoint is 0 byte(s), too short to hold a header; it "
            "was truncated or is not a sealed checkpoint",
        ),
        (
            b"\x07\x02k1" + bytes(40),
            "checkpoint: the sealed checkpoint has format version 7, and this library reads "
            "version 1; it is damaged, not a sealed checkpoint, or from a newer version of "
            "statemachine",
        ),
        (
            b"\x01\x02k1" + bytes(27),
            "checkpoint: the sealed checkpoint is 31 bytes, too short for its header, nonce and "
            "tag; it was truncated",
        ),
        (
            b"\x01\x02\xff\xfe" + bytes(40),
            "checkpoint: the sealed checkpoint's key id is not a key id; it is damaged or not "
            "a sealed checkpoint",
        ),
    ],
)
def test_truncated_or_garbage_blobs_are_corrupt(blob: bytes, message: str) -> None:
    """What is not a whole sealed checkpoint says so, exactly."""
    cipher = CheckpointCipher({"k1": K1}, current="k1")
    with pytest.raises(CheckpointCorruptError, match=exactly(message)):
        cipher.open(blob, aad=AAD)


def test_a_truncated_real_blob_is_refused() -> None:
    """Every prefix of a sealed blob is refused."""
    cipher = CheckpointCipher({"k1": K1}, current="k1")
    blob = cipher.seal(b"x" * 20, aad=AAD)
    for end in range(len(blob)):
        with pytest.raises((CheckpointCorruptError, CheckpointTamperedError)):
            cipher.open(blob[:end], aad=AAD)


def test_keys_of_another_length_are_refused() -> None:
    """AES-256 only: a 16-byte key is a setup error that names the key id, not the key."""
    with pytest.raises(
        SetupError,
        match=exactly(
            "checkpoint key 'short' is 16 bytes; AES-256-GCM keys are exactly 32 bytes "
            "(make one with statemachine.generate_key())"
        ),
    ):
        CheckpointCipher({"short": bytes(16)}, current="short")


def test_a_current_key_that_is_not_given_is_refused() -> None:
    """``current`` must name one of the keys."""
    with pytest.raises(
        SetupError,
        match=exactly(
            "the current checkpoint key 'k9' is not among the keys given ('k1'); add it, or "
            "name one of those as current"
        ),
    ):
        CheckpointCipher({"k1": K1}, current="k9")


def test_a_key_id_with_separators_is_refused() -> None:
    """Key ids are short and printable, without the ':' and ',' of the environment form."""
    with pytest.raises(SetupError, match="checkpoint key id 'a:b' is not allowed"):
        CheckpointCipher({"a:b": K1}, current="a:b")


def test_generate_key_makes_distinct_256_bit_keys() -> None:
    """Fresh random keys of 32 bytes that the cipher accepts."""
    one, two = generate_key(), generate_key()
    assert len(one) == 32
    assert one != two
    cipher = CheckpointCipher({"new": one}, current="new")
    assert cipher.open(cipher.seal(b"x", aad=b""), aad=b"") == b"x"


def test_repr_shows_key_ids_not_keys() -> None:
    """Logging the cipher never logs key material."""
    cipher = CheckpointCipher({"k1": K1, "k2": K2}, current="k2")
    assert repr(cipher) == "CheckpointCipher(keys=['k1', 'k2'], current='k2')"


# --- from_env ----------------------------------------------------------------------------

VAR = "STATEMACHINE_CHECKPOINT_KEYS"


def test_from_env_reads_keys_and_makes_the_first_current() -> None:
    """``id:base64key,...``: the first key seals, every key opens."""
    environ = {VAR: f"k2:{b64(K2)}, k1:{b64(K1)}"}
    cipher = CheckpointCipher.from_env(environ=environ)
    assert cipher.current == "k2"
    assert cipher.key_ids == ("k2", "k1")
    old = CheckpointCipher({"k1": K1}, current="k1").seal(b"old", aad=AAD)
    assert cipher.open(old, aad=AAD) == b"old"


def test_from_env_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """By default the variable comes from os.environ; another name may be given."""
    monkeypatch.setenv("MY_KEYS", f"main:{b64(K1)}")
    assert CheckpointCipher.from_env("MY_KEYS").current == "main"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "",
            f"{VAR} is not set; set it to id:base64key (comma-separated, the current key "
            "first), e.g. from base64.b64encode(statemachine.generate_key())",
        ),
        (
            f"k1:{b64(K1)},{b64(K2)}",
            f"{VAR}: entry 2 is not id:base64key; write each key as its id, a colon and the "
            "base64 key, separated by commas",
        ),
        (
            f"k1:{b64(K1)[:-3]}!!",
            f"{VAR}: the key of 'k1' (entry 1) is not valid base64",
        ),
        (
            f"k1:{b64(K1[:16])}",
            f"{VAR}: the key of 'k1' (entry 1) is 16 bytes; AES-256-GCM keys are exactly 32 bytes",
        ),
        (
            f"k1:{b64(K1)},k1:{b64(K2)}",
            f"{VAR}: key id 'k1' appears twice; key ids are unique",
        ),
        (
            f"k 1:{b64(K1)}",
            "checkpoint key id 'k 1' is not allowed; use 1 to 64 letters, digits, '.', '_' or "
            "'-' (for example 'k2025-01')",
        ),
    ],
)
def test_from_env_refuses_malformed_values_without_showing_keys(value: str, message: str) -> None:
    """Each malformed value gets its own message, and none contains key material."""
    with pytest.raises(SetupError, match=exactly(message)) as raised:
        CheckpointCipher.from_env(environ={VAR: value})
    for key in (K1, K2, K1[:16]):
        assert b64(key) not in str(raised.value)
        assert b64(key)[:8] not in str(raised.value)


def test_from_env_with_the_variable_unset_says_how_to_set_it() -> None:
    """A missing variable is the same setup error as an empty one."""
    with pytest.raises(SetupError, match=f"^{VAR} is not set"):
        CheckpointCipher.from_env(environ={})


# --- properties --------------------------------------------------------------------------

CIPHER = CheckpointCipher({"k1": K1}, current="k1")


@settings(max_examples=200, deadline=None)
@given(plaintext=st.binary(max_size=2048), aad=st.binary(max_size=64))
def test_any_plaintext_round_trips(plaintext: bytes, aad: bytes) -> None:
    """Whatever the bytes and the aad, open(seal(x)) is x."""
    assert CIPHER.open(CIPHER.seal(plaintext, aad=aad), aad=aad) == plaintext


@settings(max_examples=200, deadline=None)
@given(plaintext=st.binary(max_size=256), data=st.data())
def test_any_single_byte_change_is_detected(plaintext: bytes, data: st.DataObject) -> None:
    """Any byte of the blob changed to any other value: refused, never decrypted."""
    blob = CIPHER.seal(plaintext, aad=AAD)
    index = data.draw(st.integers(0, len(blob) - 1))
    value = data.draw(st.integers(0, 255).filter(lambda v: v != blob[index]))
    changed = blob[:index] + bytes((value,)) + blob[index + 1 :]
    with pytest.raises(CheckpointError):
        CIPHER.open(changed, aad=AAD)
