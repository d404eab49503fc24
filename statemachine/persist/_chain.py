"""The pure half of a store, held by each backend: the snapshot rule, sealed blobs, replay.

:class:`_Chain` never reads or writes a row: a backend (``_Store``'s two, and
PostgreSQL's) reads them, asks the chain what to write and what they mean, and writes
what it says. Each backend holds one (composition), so the rules below are the same
for all three, and a backend keeps only its rows and its transactions.

A full snapshot is written at seq 0, then at the first checkpoint at least
``snapshot_every`` (default 50) after the last snapshot at which the deltas stored since
add up to that snapshot's stored size. A state grows with its run, so a fixed interval
would make snapshots cost more per transition the longer the run; by this rule they
never cost more bytes than the deltas between them, so the bytes per transition stay
flat, and a load reads one snapshot and at most about its stored size again in deltas
(three times that after a compressed snapshot of less than 128 KiB, below).
A store that did not write the run's last checkpoint (another process, a restart) reads
the sizes from the stored chain, so every process applies the same rule to the same
rows. A caller's own delta ops are used when they apply (see ``_delta``).

A snapshot of 32 KiB or more is stored compressed (zlib; since 2026-12-02, issue 23): a
long run's state compresses several times over, so for the same bytes its snapshots come
several times as often and a load replays that many times fewer deltas (a delta costs a
load about ten times what a byte of snapshot does). Smaller snapshots are stored as
their text: ``snapshot_every``, not their size, spaces those. Snapshots stored as text
by earlier versions load as they always did. It is compressed before it is sealed, so
its stored size says how repetitive it is, as a delta's size says how large a change is.
Since 2026-12-03 (issue 23) the deltas after a compressed snapshot of less than
``_SPAN_BELOW`` (128 KiB) add up to three times its stored size before the next
(``_COMPRESSED_SPAN``; twice in the issue's tenth round; after a larger one, or one stored
as text, to its size): its bytes hold several times as much state as a text snapshot's,
so a load still replays fewer changes than after a text snapshot of the same state, and
a run writes and compresses a third as many of those snapshots, for fewer bytes. The
changes after one add up to less than 384 KiB, about what follows a snapshot of 384 KiB,
and a larger snapshot keeps the rule before, so a load of a long run replays at most about
what it did. A load reads the last snapshot wherever it is, so runs saved under the
earlier rules load and continue as before.
A snapshot of the phase codec's documents (the runner's) inflates, since 2026-12-03 (issue
23), to the form ``_TEXTS_AFTER`` starts: its JSON with each long text of a list (a full
chunk of the transcript or the action log, itself JSON) left out, then those texts as they
are, one after another, so that a load reads them as text and does not unescape every
quote in them (see ``_texts_after``). Compressed snapshots of the JSON alone (other
callers', and every one written before) load as they always did.
A store with a sealer (encryption at rest) never compresses: compressed then encrypted,
a blob's length would tell how much of its text repeats other text (the weakness of
CRIME and BREACH), so a sealed store writes its snapshots as text and loads as before.

Each stored blob is ``sha256(sealed) + sealed``, where ``sealed`` is the encoded JSON
(compressed, for a large snapshot) passed through the optional :class:`Sealer`
(encryption at rest) with the associated data ``b"<run_id>:<seq>"``. The checksum
catches a truncated or overwritten blob even without encryption; the sealer's own tag
catches tampering.

The checkpoints of a run form a chain, and the run's row records its head. Checkpoint
``seq``'s link is ``sha256(domain, run id, seq, kind, the previous link, the blob's
checksum)`` (the link before seq 0 is 32 zero bytes), and the head stored with the
run's row is the last link - followed, when the store has a sealer, by a tag: the
sealer's seal of nothing with the associated data ``b"head:<run_id>:<seq>:<link, hex>"``,
which is a MAC under the store's key. A snapshot stores the link before it
(``previous``), so its own link binds every checkpoint before it: a load checks the
chain from the run's last snapshot against the head (every row from it present and in
order, every blob's checksum, every link), then the tag, before it replays a thing
(:meth:`_Chain.from_snapshot`); ``verify``, an audit, checks the whole chain from seq 0
the same way, and a load falls back to it for a snapshot written before snapshots
stored their link, or when the check from the snapshot fails (so that the error names
the first checkpoint found wrong). Any failure is :class:`CheckpointTamperedError` naming
the run and the checkpoint, and other runs are untouched. So a truncated tail, a
deleted row (a delta or a snapshot), a blob moved or copied from another run or
another position, two rows swapped, an old blob put back, or a head rolled back to an
earlier checkpoint is refused. With a key, none of it can be forged without the key.
Without one the chain is a plain digest chain: it catches accidents, moves and a
careless edit, not a forger who recomputes the links and the head (say, with this
module); seal the store when that matters. Rolling the whole database back to an
earlier copy is not detectable from inside it (keep backups and their dates apart).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from operator import is_not
from typing import Any, Final, NamedTuple, cast

from .._approval import waits_for_approval
from .._errors import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointKeyError,
    CheckpointOrderError,
    CheckpointTamperedError,
    ConfigError,
    DecisionRefusedError,
)
from .._fast._pydantic import _trusted
from .._json import (
    JSON,
    Texts,
    _encode_str,
    _refuse_constant,
    dumps,
    dumps_bytes,
    loads,
    parts_reusing,
)
from .._json import Long as _Long
from .._ledger import EffectRecord
from ._delta import _apply, _diff, _Seen, _seen_of
from ._lifecycle import RunLifecycle, RunStatus
from ._protocol import Document, RunRecord, Sealer
from ._rows import (
    _DIGEST,
    _RECENT_RUNS,
    _SAVED_FIELDS,
    _SETTLED,
    _aad,
    _Change,
    _decision_aad,
    _effect_aad,
    _EffectRow,
    _head_aad,
    _Last,
    _Row,
    _Since,
    _since_of,
    _system_clock,
    _utc,
)

# _written, _whole and _compressed: the plain steps the snapshot's one pass (_placed,
# _head) is tested against, beside the chain's own names.
__all__ = ["_NO_HEAD", "_Chain", "_compressed", "_every", "_link", "_whole", "_written"]

_DOMAIN: Final = b"statemachine checkpoint chain 1\0"
_NO_HEAD: Final = bytes(_DIGEST)  # the link before checkpoint 0
# A snapshot's JSON of at least this many bytes is stored compressed (zlib, level 1).
# Smaller ones are stored as they are: up to about this size, ``snapshot_every`` rather
# than the snapshot's size decides how many deltas follow it, so compressing it would
# not shorten a load. A compressed blob starts with zlib's first byte, which no JSON
# text starts with (JSON starts with a value, a space or a byte order mark).
_COMPRESS_FROM: Final = 32 * 1024
_ZLIB: Final = b"x"
# The deltas after a compressed snapshot of fewer than _SPAN_BELOW bytes add up to this many
# times its stored size before the next snapshot (after any other, to its size): see the
# module's docstring.
_COMPRESSED_SPAN: Final = 3
_SPAN_BELOW: Final = 128 * 1024
# A compressed snapshot that inflates to this byte first holds its long texts after its
# JSON (see ``_texts_after``); JSON text never starts with it.
_TEXTS_AFTER: Final = b"\x01"
# A text in a list of at least this many characters (a full chunk of a transcript or an
# action log, a long result) is compressed once, when a snapshot first holds it, and its
# compressed form kept for the run's next snapshots (see ``_compressed``).
_PIECE: Final = 1024
_PIECES_RUNS: Final = 8  # runs whose pieces a store keeps
_HEADER: Final = b"\x78\x01"  # zlib's header: deflate, a 32 KiB window, the fastest level
_END: Final = zlib.compressobj(1, zlib.DEFLATED, -15).flush()  # deflate's empty last block
_ADLER: Final = 65521  # Adler-32's modulus
_STORED: Final = 512  # bytes between long texts stored as they are (see ``_deflated``)
_LOADED_RUNS: Final = 8  # runs whose loaded document a store keeps for their next save
# ``_json.loads`` (non-integer numbers as ``Decimal``, no NaN or Infinity), made once:
# ``json.loads`` with these arguments builds a decoder for each blob a load reads.
_DECODER: Final = json.JSONDecoder(parse_float=Decimal, parse_constant=_refuse_constant)
# Its scanner: one JSON value from a position, and where the value ends.
_SCAN: Final[Callable[[str, int], tuple[Any, int]]] = vars(_DECODER)["scan_once"]


def _scanned(blob: bytes, start: int, kind: str) -> dict[str, Any] | None:
    """``_loads(blob[start:])`` when it is a checkpoint's payload of kind ``kind`` and
    in the usual form (a JSON object in UTF-8 that ends with its last brace), read by the
    scanner directly, without copying the bytes; ``None`` for anything else, or anything
    the scanner refuses (the plain path then gives the same value or error)."""
    if not (
        type(blob) is bytes
        and blob[start : start + 1] == b"{"
        and blob[start + 1 : start + 2] != b"\0"
    ):
        return None
    # As _loads: json.detect_encoding reads "{" and a byte that is not 0 as UTF-8.
    try:
        text = str(memoryview(blob)[start:], "utf-8", "surrogatepass")
        payload, end = _SCAN(text, 0)
    except Exception:  # the plain path raises what is to be raised
        return None
    if end == len(text) and type(payload) is dict and payload.get("kind") == kind:
        return payload
    return None


def _loads(plain: bytes) -> JSON:
    """``_json.loads(plain)``: bytes are read as ``json.loads`` reads them."""
    if type(plain) is not bytes:  # a sealer's own type: the plain path
        return loads(plain)
    value: JSON = _DECODER.decode(plain.decode(json.detect_encoding(plain), "surrogatepass"))
    return value


def _texts_after(plain: bytes) -> JSON:
    """The payload of a compressed snapshot in the form ``_TEXTS_AFTER`` starts
    (``plain``: inflated), the value its JSON alone would give.

    After that byte: the JSON list ``[places, payload]``, then the long texts left out of
    ``payload``, one after another, as they are. Each place, ``[key, ..., index, length]``,
    names by the keys of objects the list whose item ``index`` (``null`` in ``payload``) is
    the next ``length`` characters; the texts end where the blob does. Anything else is a
    ``ValueError``.
    """
    text = str(memoryview(plain)[1:], "utf-8", "surrogatepass")
    value, end = _DECODER.raw_decode(text)
    if not (type(value) is list and len(value) == 2 and type(value[0]) is list):
        raise ValueError("the snapshot's places and payload are not a list of two")
    places, payload = value
    for place in places:
        if not (type(place) is list and len(place) >= 2):
            raise ValueError(f"a place of a long text is not a path and a length: {place!r}")
        *keys, index, length = place
        target = payload
        for key in keys:
            if not (type(target) is dict and type(key) is str and key in target):
                raise ValueError(f"the place {place!r} does not lead through objects")
            target = target[key]
        if not (
            type(target) is list
            and type(index) is int
            and type(length) is int
            and 0 <= index < len(target)
            and target[index] is None
            and 0 <= length <= len(text) - end
        ):
            raise ValueError(f"the place {place!r} names no left-out item of a list")
        target[index] = text[end : end + length]
        end += length
    if end != len(text):
        raise ValueError("the snapshot holds more text than its places name")
    read: JSON = payload
    return read


class _Piece(NamedTuple):
    """A long text of a snapshot: its JSON deflated, and that UTF-8's Adler-32 and size."""

    deflated: bytes
    adler: int
    size: int  # bytes of its UTF-8


# A run's pieces by the identity of the list item they write: (the item, the piece).
_Pieces = dict[int, tuple[str, _Piece]]


def _deflated(raw: bytes) -> bytes:
    """``raw`` as deflate blocks that end on a byte boundary and not the stream (so any
    such runs, one after another and then ``_END``, are one deflate stream).

    Up to ``_STORED`` bytes (the few characters between two chunks) as one stored block:
    a compressor costs more to set up (it clears its tables) than it would save there.
    """
    if len(raw) <= _STORED:  # a stored block: not last, its length and the length's complement
        return (
            b"\x00"
            + len(raw).to_bytes(2, "little")
            + (len(raw) ^ 0xFFFF).to_bytes(2, "little")
            + raw
        )
    packer = zlib.compressobj(1, zlib.DEFLATED, -15)
    return packer.compress(raw) + packer.flush(zlib.Z_SYNC_FLUSH)


def _adler_joined(first: int, second: int, size: int) -> int:
    """The Adler-32 of ``a + b`` from ``a``'s, ``b``'s and ``len(b)`` (zlib's
    ``adler32_combine``, which Python's ``zlib`` does not offer)."""
    rest = size % _ADLER
    low = (first & 0xFFFF) + (second & 0xFFFF) + _ADLER - 1
    high = rest * (first & 0xFFFF) + (first >> 16) + (second >> 16) + _ADLER - rest
    return (low % _ADLER) | ((high % _ADLER) << 16)


def _written(value: Any, texts: Texts, kept: Texts, out: list[str | _Long]) -> None:
    """``_json.dumps_reusing``'s text of ``value`` into ``out`` as parts (the texts of
    list items that are objects or lists reused from ``texts``, and kept in ``kept``),
    each text of at least ``_PIECE`` characters in a list left as a ``_Long``."""
    parts_reusing(value, texts, kept, out, _PIECE)


def _text(parts: list[str | _Long]) -> str:
    """The text ``parts`` (from ``_written``) stand for."""
    return "".join(
        part if isinstance(part, str) else dumps_bytes(part.item).decode() for part in parts
    )


def _longs(value: Any, path: list[str | int], out: list[tuple[list[str | int], str]]) -> None:
    """The long texts ``_written`` leaves as ``_Long`` in ``value``, in its order, each
    with its place: the text items of at least ``_PIECE`` characters of the lists reached
    through objects alone (the items of a list are written whole, texts inside them too)."""
    if type(value) is dict:
        for key, item in value.items():
            _longs(item, [*path, key], out)
    elif type(value) is list:
        for index, item in enumerate(value):
            if type(item) is str and len(item) >= _PIECE:
                out.append(([*path, index], item))


def _split(payload: Any, parts: list[str | _Long]) -> tuple[bytes, list[str]] | None:
    """The start of ``payload``'s snapshot in the form ``_TEXTS_AFTER`` starts (that byte,
    the places and the JSON without its long texts: see ``_texts_after``), and those
    texts, from ``_written``'s ``parts`` of it; ``None`` if its long texts are not the
    ones ``_longs`` finds in order (never, as ``_written`` writes)."""
    longs: list[tuple[list[str | int], str]] = []
    _longs(payload, [], longs)
    texts = [text for _, text in longs]
    # The parts' long texts are those, the very objects in order ("null" in their stead).
    items = [part.item for part in parts if not isinstance(part, str)]
    if len(items) != len(texts) or any(map(is_not, items, texts)):
        return None
    kept = [part if isinstance(part, str) else "null" for part in parts]
    # Keys and ints alone: written by orjson as ``dumps`` writes them (tests/test_save_fast3.py).
    places = dumps_bytes([[*path, len(text)] for path, text in longs]).decode()
    head = "[" + places + "," + "".join(kept) + "]"
    return _TEXTS_AFTER + head.encode("utf-8"), texts


def _placed(
    value: Any,
    texts: Texts,
    kept: Texts,
    out: list[str | _Long],
    path: list[str | int],
    places: list[list[str | int]],
    longs: list[str],
) -> None:
    """``_written(value, texts, kept, out)`` and, in the same pass, what ``_longs`` finds
    of ``value`` below ``path``: each long text into ``longs`` and its place with its
    length (``[*path, index, len(text)]``, as ``_split`` writes it) into ``places``, in
    order. The same steps as ``_json.parts_reusing`` with ``_PIECE`` (the same parts, the
    same errors at the same point); ``path`` is as it was when it returns."""
    if type(value) is dict:
        out.append("{")
        for index, (key, item) in enumerate(value.items()):
            if type(key) is not str:
                raise TypeError(f"JSON object keys must be strings, got {key!r}")
            # ("," if index else "") + _encode_str(key) + ":", kept for the key (a str's
            # text is its own: the same for every equal str).
            written = _KEY_TEXTS.get(key)
            if written is None:
                written = _key_texts(key)
            out.append(written[1] if index else written[0])
            path.append(key)
            _placed(item, texts, kept, out, path, places, longs)
            path.pop()
        out.append("}")
    elif type(value) is list:
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            if type(item) is dict or type(item) is list:
                known = texts.get(id(item))
                if known is not None and known[0] is item:
                    text = known[1]
                else:
                    text = dumps_bytes(item).decode()
                kept[id(item)] = (item, text)
                out.append(text)
            elif type(item) is str and len(item) >= _PIECE:
                out.append(_Long(item))
                places.append([*path, index, len(item)])
                longs.append(item)
            else:
                out.append(dumps_bytes(item).decode())
        out.append("]")
    else:
        out.append(dumps_bytes(value).decode())


# A key's texts in an object as _placed writes it: first, and after another member
# (``_encode_str(key) + ":"`` and ``"," + _encode_str(key) + ":"``), for at most
# _KEY_TEXTS_KEPT keys (a snapshot's objects reached through objects alone: the codec's
# names); any other key's are made each time.
_KEY_TEXTS: Final[dict[str, tuple[str, str]]] = {}
_KEY_TEXTS_KEPT: Final = 4096


def _key_texts(key: str) -> tuple[str, str]:
    first = _encode_str(key) + ":"
    written = (first, "," + first)
    if len(_KEY_TEXTS) < _KEY_TEXTS_KEPT:
        _KEY_TEXTS[key] = written
    return written


# A part's text in a snapshot's head, by the part's type: a long text's is "null" (it
# follows the JSON), a text's its own (dict.get's default).
_NULLED: Final[dict[type, str]] = {_Long: "null"}


def _head(parts: list[str | _Long], places: list[list[str | int]]) -> bytes:
    """``_split``'s first answer from ``_placed``'s parts and places: the same bytes, the
    parts' long texts put as "null" in C (each part is a ``str`` or a ``_Long``)."""
    joined = "".join(cast("Iterable[str]", map(_NULLED.get, map(type, parts), parts)))
    head = "[" + dumps_bytes(places).decode() + "," + joined + "]"
    return _TEXTS_AFTER + head.encode("utf-8")


def _whole(payload: Any, parts: list[str | _Long]) -> bytes:
    """``payload``'s snapshot compressed in one go, in the form ``_TEXTS_AFTER`` starts."""
    split = _split(payload, parts)
    if split is None:  # as _written wrote it: the JSON alone
        return zlib.compress(_text(parts).encode("utf-8"), 1)
    return _whole_split(*split)


def _whole_split(head: bytes, texts: list[str]) -> bytes:
    """``_whole``'s answer from its ``_split``."""
    return zlib.compress(head + "".join(texts).encode("utf-8"), 1)


def _compressed(payload: Any, parts: list[str | _Long], pieces: _Pieces) -> tuple[bytes, _Pieces]:
    """``_whole(payload, parts)``'s equal for ``zlib.decompress``, each long text deflated
    once: those ``pieces`` holds already are not compressed again. Returns the pieces it
    used.

    A long run's snapshots hold the same full chunks again and again, so each is
    compressed once per run, and a snapshot compresses only what is new and its JSON
    without them. The JSON and each piece are deflated on their own (no match reaches
    across), a stream zlib reads as one.
    """
    split = _split(payload, parts)
    if split is None:
        return zlib.compress(_text(parts).encode("utf-8"), 1), {}
    return _compressed_split(*split, pieces)


def _compressed_split(head: bytes, texts: list[str], pieces: _Pieces) -> tuple[bytes, _Pieces]:
    """``_compressed``'s answer from its ``_split``."""
    kept: _Pieces = {}
    out = [_HEADER, _deflated(head)]
    adler = zlib.adler32(head)
    for item in texts:
        known = pieces.get(id(item))
        if known is None or known[0] is not item:
            raw = item.encode("utf-8")
            known = (item, _Piece(_deflated(raw), zlib.adler32(raw), len(raw)))
        kept[id(item)] = known
        out.append(known[1].deflated)
        adler = _adler_joined(adler, known[1].adler, known[1].size)
    out += [_END, adler.to_bytes(4, "big")]
    return b"".join(out), kept


def _link(run_id: str, seq: int, snapshot: bool, previous: bytes, digest: bytes) -> bytes:
    """Checkpoint ``seq``'s link: its place (run, seq, kind), the link before, its checksum."""
    kind = b"f" if snapshot else b"d"
    place = run_id.encode() + b"\0" + seq.to_bytes(8, "big") + kind
    return hashlib.sha256(_DOMAIN + place + previous[:_DIGEST] + digest).digest()


def _last_link(run_id: str, rows: list[_Row], link: bytes) -> bytes:
    """The link of the last of ``rows`` (checkpoints in order, their blobs checked), the
    link before the first being ``link``: ``_link`` over each, the run's part made once."""
    run = _DOMAIN + run_id.encode() + b"\0"
    sha256 = hashlib.sha256
    for row in rows:
        place = run + row.seq.to_bytes(8, "big") + (b"f" if row.snapshot else b"d")
        link = sha256(place + link[:_DIGEST] + row.blob[:_DIGEST]).digest()
    return link


def _every(snapshot_every: int) -> int:
    """``snapshot_every``, checked: a positive int, else ``ConfigError``."""
    if snapshot_every < 1:
        raise ConfigError((f"snapshot_every must be a positive int, got {snapshot_every!r}",))
    return snapshot_every


class _Chain:
    """A store's checkpoint chain rules and blobs: what to write, and what was read.

    ``where`` names the store in error messages; ``recent`` remembers the last checkpoint
    of the runs this store saved most recently (``_RECENT_RUNS`` of them), to diff the
    next one against or to use a caller's ops.
    """

    def __init__(
        self,
        *,
        snapshot_every: int,
        sealer: Sealer | None,
        clock: Callable[[], datetime],
        where: str,
    ) -> None:
        self.snapshot_every = _every(snapshot_every)
        self.sealer = sealer
        self.clock = clock
        self.where = where
        self.recent: OrderedDict[str, _Last] = OrderedDict()
        # The runs loaded lately (not saved by this store since): a resume saves next.
        # Few, as a load's document may be large and many are loaded only to be read.
        self.loaded: OrderedDict[str, _Last] = OrderedDict()
        # The compressed long texts of the runs whose snapshots this store wrote lately.
        self.pieces: OrderedDict[str, _Pieces] = OrderedDict()

    def forget(self, run_id: str) -> None:
        """Forget what was remembered of the run (it was removed)."""
        self.recent.pop(run_id, None)
        self.loaded.pop(run_id, None)
        self.pieces.pop(run_id, None)

    def last(self, run_id: str) -> _Last | None:
        """What this store remembers of the run's latest checkpoint (saved or loaded)."""
        last = self.recent.get(run_id)
        return self.loaded.get(run_id) if last is None else last

    def decided(self, record: RunRecord, document: Document) -> tuple[bytes, RunRecord]:
        """The sealed decision and the run's new row, or DecisionRefusedError (every store)."""
        run_id = record.run_id
        waits = (
            record.status is RunStatus.INTERRUPTED
            and record.phase == "AwaitApproval"
            and waits_for_approval(record.waiting_for)
        )
        if not waits:
            where = f"{record.status.value} at {record.phase}"
            if record.waiting_for:
                where += f", waiting for {record.waiting_for}"
            raise DecisionRefusedError(
                f"it is not waiting for an approval (it is {where}). Approve or deny "
                "only a run that is interrupted waiting for an approval; list those "
                "with the registry (status interrupted).",
                run_id=run_id,
            )
        if record.decision_pending:
            raise DecisionRefusedError(
                "it already has a decision waiting for a worker to resume it with; "
                "nothing was changed. One decision per approval: wait for the run to "
                "go on, or stop it.",
                run_id=run_id,
            )
        blob = self.seal({"kind": "decision", "decision": document}, _decision_aad(run_id))
        changed = record.model_copy(update={"decision_pending": True, "updated_at": self.now()})
        return blob, changed

    def open_decision(self, run_id: str, blob: bytes) -> Document:
        payload = self.unseal(blob, _decision_aad(run_id), run_id, "its pending decision")
        if not isinstance(payload, dict) or payload.get("kind") != "decision":
            raise self.damaged(run_id, "its pending decision", "is not a decision")
        document = payload.get("decision")
        if not isinstance(document, dict):
            raise self.damaged(run_id, "its pending decision", "is not a decision")
        return document

    def now(self) -> datetime:
        if self.clock is _system_clock:  # aware and in UTC already: _utc would return it
            return datetime.now(UTC)
        return _utc(self.clock(), "the checkpointer's clock")

    def stored(
        self, run_id: str, rows: list[_Row], record: RunRecord
    ) -> tuple[Mapping[str, Any], _Since]:
        """The stored document and ``_Since`` of a chain (its last snapshot, then the deltas)."""
        return self.replay(run_id, rows, record)[1], self.since_of(rows)

    def span(self, blob: bytes) -> int:
        """The bytes of deltas that follow the snapshot ``blob`` before the next is due
        (``_Since.size``): three times its size when it is stored compressed in fewer than
        ``_SPAN_BELOW`` bytes, else its size."""
        if self.sealer is None and len(blob) < _SPAN_BELOW and blob[_DIGEST : _DIGEST + 1] == _ZLIB:
            return len(blob) * _COMPRESSED_SPAN
        return len(blob)

    def since_of(self, rows: list[_Row]) -> _Since:
        """``_Since`` of a chain as ``_chain_rows`` reads it (the last snapshot, then its
        deltas), the snapshot's size as :meth:`span` counts it."""
        return _since_of(rows)._replace(size=self.span(rows[0].blob))

    def checkpoint(
        self,
        run_id: str,
        seq: int,
        document: Mapping[str, Any],
        prepared: tuple[dict[str, Any], _Seen | None, _Since],
        change: _Change | None,
        previous: bytes | None,
    ) -> tuple[bool, bytes, _Last]:
        """Whether checkpoint ``seq`` is a snapshot, its blob, and what to remember of it
        once it is stored, with the run's new head (every store).

        ``previous`` is the run's head before it (``None`` for a new run): see
        :meth:`previous_head`.
        """
        payload, seen, since = prepared
        snapshot = payload["kind"] == "full"
        if snapshot:  # the link before it, which a load from this snapshot starts from
            payload["previous"] = self.before(run_id, seq, previous).hex()
        blob, texts = self.blob(run_id, seq, payload, change)
        head = self.head(run_id, seq, snapshot, blob[:_DIGEST], previous)
        size = self.span(blob) if snapshot else len(blob)
        return (
            snapshot,
            blob,
            _Last(seq, document, seen, texts, since.after(seq, snapshot, size), head),
        )

    def previous_head(self, run_id: str, record: RunRecord | None) -> bytes | None:
        """The run's head as this store remembers it, when it saved the run's latest
        checkpoint itself; ``None`` otherwise (read it from the run's row then)."""
        last = self.last(run_id)
        if record is None or last is None or last.seq != record.seq:
            return None
        return last.head

    def head(
        self, run_id: str, seq: int, snapshot: bool, digest: bytes, previous: bytes | None
    ) -> bytes:
        """The run's head once checkpoint ``seq`` (its checksum ``digest``) follows the head
        ``previous``; ``CheckpointTamperedError`` when a later checkpoint has none to follow."""
        link = _link(run_id, seq, snapshot, self.before(run_id, seq, previous), digest)
        if self.sealer is None:
            return link
        return link + self.sealer.seal(b"", aad=_head_aad(run_id, seq, link))

    def before(self, run_id: str, seq: int, previous: bytes | None) -> bytes:
        """The link checkpoint ``seq`` follows: none for seq 0, else the head ``previous``."""
        if seq == 0:
            return _NO_HEAD
        if previous is None or len(previous) < _DIGEST:
            raise self.tampered(
                run_id,
                "has no recorded head to add checkpoint {seq} to (the run's row was changed)",
                seq=seq,
            )
        return previous[:_DIGEST]

    def from_snapshot(
        self, run_id: str, rows: list[_Row], record: RunRecord, head: bytes | None
    ) -> Document | None:
        """The run's document, checked from its last snapshot (``rows``: it, then every
        checkpoint after it); ``None`` when this check cannot decide (call ``verify``).

        The snapshot holds the whole state, and its link (stored in it as ``previous``,
        the link before it) binds every checkpoint before it: so its checksum and link,
        every row after it and the head are checked here, and the rows before it only by
        the full check (:meth:`verify`). Any doubt - a row missing, a checksum, a snapshot
        written before snapshots held their link, a chain that does not end at the head -
        is left to the full check, which names the checkpoint.
        """
        if head is None or not rows or not rows[0].snapshot or rows[-1].seq != record.seq:
            return None
        self.check_head(run_id, record.seq, head[:_DIGEST], head)  # its tag, first
        first = rows[0].seq
        for expected, row in enumerate(rows, first):
            sealed = row.blob[_DIGEST:]
            if row.seq != expected or not sealed:
                return None
            if hashlib.sha256(sealed).digest() != row.blob[:_DIGEST]:
                return None
        try:
            if self.sealer is None:
                payload = self.decode_plain(run_id, rows[0])
            else:
                payload = self.decode(run_id, rows[0], checked=True)
            link = bytes.fromhex(payload["previous"])
        except (CheckpointCorruptError, KeyError, TypeError, ValueError):
            return None
        if len(link) != _DIGEST or (first == 0 and link != _NO_HEAD):
            return None
        if head[:_DIGEST] != _last_link(run_id, rows, link):
            return None
        # Every blob's checksum was checked above: the replay does not check it again.
        document = self.replay(run_id, rows, record, payload, checked=True)[1]
        # The run's latest checkpoint, as if this store had saved it: a resume's first
        # save gives ops from this very document (see ``prepare``), so it is a delta.
        self.recent.pop(run_id, None)
        self.loaded[run_id] = _Last(record.seq, document, None, {}, self.since_of(rows), head)
        self.loaded.move_to_end(run_id)
        while len(self.loaded) > _LOADED_RUNS:
            self.loaded.popitem(last=False)
        return document

    def verify(self, run_id: str, rows: list[_Row], record: RunRecord, head: bytes | None) -> int:
        """Check a run's whole chain (``rows``, every checkpoint from seq 0) against its
        head; the index of the last snapshot in ``rows``, where a replay starts.

        ``CheckpointTamperedError`` names the first checkpoint found wrong: a missing or
        extra row, a blob that fails its checksum, or - when every row is whole but the
        chain does not end at the head, or the head's tag does not open - the head.
        """
        link = _NO_HEAD
        start = 0
        for expected, row in enumerate(rows):
            if row.seq != expected:
                raise self.tampered(run_id, "is missing (a row was removed)", seq=expected)
            if expected > record.seq:
                raise self.tampered(
                    run_id,
                    f"is stored after the run's recorded last checkpoint ({record.seq}): "
                    "its row was rolled back",
                    seq=expected,
                )
            digest, sealed = row.blob[:_DIGEST], row.blob[_DIGEST:]
            if len(row.blob) <= _DIGEST or hashlib.sha256(sealed).digest() != digest:
                raise self.tampered(
                    run_id, "does not match its checksum (truncated or overwritten)", seq=row.seq
                )
            link = _link(run_id, row.seq, row.snapshot, link, digest)
            if row.snapshot:
                start = expected
        if len(rows) != record.seq + 1:
            raise self.tampered(run_id, "is missing (the chain ends early)", seq=len(rows))
        self.check_head(run_id, record.seq, link, head)
        return start

    def check_head(self, run_id: str, seq: int, link: bytes, head: bytes | None) -> None:
        """``head`` is the one the chain ending in ``link`` at ``seq`` was stored with."""
        if head is None or head[:_DIGEST] != link:
            what = "has no recorded head" if head is None else "does not match the recorded head"
            raise self.tampered(
                run_id,
                f"{what}: the chain of checkpoints up to it is not the one that was saved "
                "(a checkpoint was replaced, moved or removed, or the head rolled back)",
                seq=seq,
            )
        if self.sealer is None:
            return
        tag = head[_DIGEST:]
        try:
            if not tag:
                raise ValueError("the head carries no tag")
            self.sealer.open(tag, aad=_head_aad(run_id, seq, link), run_id=run_id)
        except CheckpointKeyError:
            raise  # not a change: the key that recorded it is not configured
        except Exception as exc:
            why = exc.detail if isinstance(exc, CheckpointError) else str(exc)
            raise self.tampered(
                run_id,
                f"is not the head this store's key recorded (the key is not the one that "
                f"saved the run, or the head was changed: {why})",
                seq=seq,
            ) from None

    def migrated_head(self, run_id: str, rows: list[_Row]) -> bytes:
        """The head of a run stored before heads were recorded, from its rows as they are."""
        if self.sealer is None and any(row.blob[_DIGEST : _DIGEST + 1] != b"{" for row in rows):
            raise ConfigError(
                (
                    f"run {run_id!r} in {self.where} has sealed checkpoints written before "
                    "runs recorded their head; open the store once with its checkpoint keys "
                    "(sealer=...) so that the heads are recorded under the key",
                )
            )
        head: bytes | None = None
        for row in rows:
            head = self.head(run_id, row.seq, row.snapshot, row.blob[:_DIGEST], head)
        if head is None:
            raise self.tampered(run_id, "has no checkpoints", seq=0)
        return head

    def tampered(self, run_id: str, problem: str, *, seq: int) -> CheckpointTamperedError:
        return CheckpointTamperedError(
            f"checkpoint {seq} {problem.format(seq=seq)}. Nothing was loaded and nothing in "
            f"{self.where} was changed; other runs are unaffected. Restore the store from a "
            "backup to resume this run, or abort it and start it again.",
            run_id=run_id,
            seq=seq,
        )

    def saved_status(
        self,
        run_id: str,
        seq: int,
        record: RunRecord | None,
        status: RunStatus,
        waiting_for: str,
    ) -> tuple[RunStatus, str]:
        """The status and wait a checkpoint ``seq`` is saved with, or the error refusing it.

        ``CheckpointOrderError`` unless ``seq`` is the run's next; ``IllegalStatusChangeError``
        for a change the lifecycle refuses. Every store uses it.
        """
        expected = 0 if record is None else record.seq + 1
        if seq != expected:
            raise CheckpointOrderError(run_id, seq=seq, expected=expected)
        current = RunStatus.RUNNING if record is None else record.status
        if current is RunStatus.CANCELLED and status is not RunStatus.CANCELLED:
            # Stopped from elsewhere while a runner still drove it (a resume sets it
            # running first): the phase it finished is kept, and the run stays
            # stopped - unless that phase ended it.
            if status is RunStatus.COMPLETED:
                current = RunStatus.RUNNING
            else:
                status, waiting_for = RunStatus.CANCELLED, ""
        if status != current:  # building the machine costs more than the whole delta
            RunLifecycle(run_id, current).move_to(status)
        return status, waiting_for

    @staticmethod
    def saved_record(
        record: RunRecord | None,
        run_id: str,
        seq: int,
        agent: str,
        status: RunStatus,
        phase: str,
        waiting_for: str,
        now: datetime,
    ) -> RunRecord:
        """The run's row once checkpoint ``seq`` is saved (every store)."""
        # Every value is of its field's type already: made as model_construct makes it.
        values = {
            "run_id": run_id,
            "agent": agent,
            "status": status,
            "phase": phase,
            "waiting_for": waiting_for,
            "updated_at": now,
            "seq": seq,
            # A stop request stands until the run is stopped (or ends); a pending
            # decision was used by the phase whose result this checkpoint is.
            "stop_requested": record is not None
            and record.stop_requested
            and status not in _SETTLED,
            "decision_pending": False,
        }
        return _trusted(RunRecord, values, set(_SAVED_FIELDS))

    def prepare(
        self,
        run_id: str,
        seq: int,
        record: RunRecord | None,
        document: Mapping[str, Any],
        change: _Change | None,
        stored: tuple[Mapping[str, Any], _Since] | None,
    ) -> tuple[dict[str, Any], _Seen | None, _Since] | None:
        """The payload of checkpoint ``seq``, what to remember of it, and the run's
        ``_Since`` before it (every store).

        ``None`` when this store does not know the run's latest checkpoint (another
        process saved since, or it forgot the run): call again with the stored document
        and the ``_Since`` of the stored chain as ``stored``. The caller's ops are
        the delta when their base is the document this store saved last, as the run's
        latest checkpoint; nothing is fingerprinted then. A caller that gives ops keeps
        its documents unchanged, so the fingerprints are taken later if ever needed.
        """
        last = self.last(run_id)
        if last is not None and (record is None or last.seq != record.seq):
            last = None  # another process saved since, or the run is new again
        remember_later = change is not None
        if record is None:  # seq 0 is always a snapshot
            seen = None if remember_later else _seen_of(document)
            return {"kind": "full", "document": document}, seen, _Since(seq, 0, 0)
        if last is not None:
            since = last.since
        elif stored is not None:
            since = stored[1]
        else:
            return None
        if self.snapshot_due(seq, since):
            seen = None if remember_later else _seen_of(document)
            return {"kind": "full", "document": document}, seen, since
        if change is not None and last is not None and change.base is last.document:
            return {"kind": "delta", "ops": change.ops}, None, since
        if last is not None:
            previous = last.seen if last.seen is not None else _seen_of(last.document)
        else:
            assert stored is not None
            previous = _seen_of(stored[0])
        ops: list[list[Any]] = []
        seen = _diff(previous, document, [], ops)
        return {"kind": "delta", "ops": ops}, seen, since

    def snapshot_due(self, seq: int, since: _Since) -> bool:
        """Whether checkpoint ``seq`` is a full snapshot (see the module's docstring).

        At least ``snapshot_every`` checkpoints after the last snapshot, and once the
        deltas stored since add up to that snapshot's size (three times it for a compressed
        one of less than ``_SPAN_BELOW``: ``span``).
        """
        return seq - since.seq >= self.snapshot_every and since.deltas >= since.size

    def blob(
        self, run_id: str, seq: int, payload: dict[str, Any], change: _Change | None
    ) -> tuple[bytes, Texts]:
        """Checkpoint ``seq``'s blob, and the texts of its list items to reuse (every store).

        A caller that gives ops gives documents whose parts never change (from the phase
        codec): they are written in C, and a snapshot reuses the text of every list item
        an earlier snapshot of the run already wrote, so it costs what is new. A large
        snapshot is compressed: the run's first here whole, the next ones by pieces, each
        long text compressed once (``_compressed``).
        """
        last = self.last(run_id)
        texts: Texts = {} if last is None else last.texts
        if payload["kind"] != "full":
            if change is None:
                return self.encode(run_id, seq, payload), texts
            # A document from the phase codec (text keys only): written by orjson, without
            # the NaN read-back when the delta is the caller's FiniteOps as given.
            finite = change.finite and payload["ops"] is change.ops
            plain = dumps_bytes(payload, finite=finite)
            return self.seal_plain(plain, _aad(run_id, seq)), texts
        if change is None:
            plain = dumps(payload).encode()
            if len(plain) >= _COMPRESS_FROM and self.sealer is None:
                plain = zlib.compress(plain, 1)
            return self.seal_plain(plain, _aad(run_id, seq)), texts
        parts: list[str | _Long] = []
        kept: Texts = {}
        # _written's parts, and the long texts and places _split finds, in one pass.
        places: list[list[str | int]] = []
        longs: list[str] = []
        _placed(payload, texts, kept, parts, [], places, longs)
        # Below _COMPRESS_FROM // _PIECE long texts (each of at least _PIECE characters),
        # its text's length decides, counted in C: each text part's, each long text's (its
        # part, a _Long, is a tuple of one); from there on it is long enough, uncounted.
        short = len(longs) * _PIECE < _COMPRESS_FROM and (
            sum(map(len, parts)) - len(longs) + sum(map(len, longs)) < _COMPRESS_FROM
        )
        if short or self.sealer is not None:  # sealed: never compressed
            return self.seal_plain(_text(parts).encode("utf-8"), _aad(run_id, seq)), kept
        head = _head(parts, places)
        pieces = self.pieces.pop(run_id, None)
        if pieces is None:  # the run's first here (a resume): whole, the pieces next time
            plain, pieces = _whole_split(head, longs), {}
        else:
            plain, pieces = _compressed_split(head, longs, pieces)
        self.pieces[run_id] = pieces
        while len(self.pieces) > _PIECES_RUNS:
            self.pieces.popitem(last=False)
        return self.seal_plain(plain, _aad(run_id, seq)), kept

    def remember(self, run_id: str, last: _Last) -> None:
        self.loaded.pop(run_id, None)
        self.recent[run_id] = last
        self.recent.move_to_end(run_id)
        while len(self.recent) > _RECENT_RUNS:
            self.recent.popitem(last=False)

    def replay(
        self,
        run_id: str,
        rows: list[_Row],
        record: RunRecord,
        first: dict[str, Any] | None = None,
        *,
        checked: bool = False,
    ) -> tuple[int, Document]:
        """The document that ``rows`` (a snapshot, then the deltas after it) build up;
        ``first`` is the first row's payload when it was decoded already; ``checked``,
        every row's checksum was checked already (the caller holds the same bytes)."""
        if not rows or not rows[0].snapshot:
            raise self.corrupt(run_id, "has no full snapshot to start from", seq=None)
        document: Document = {}
        expected = rows[0].seq
        for row in rows:
            if row.seq != expected:
                raise self.corrupt(run_id, "is missing", seq=expected)
            if first is not None:
                payload, first = first, None
            elif checked and self.sealer is None:
                payload = self.decode_plain(run_id, row)
            else:
                payload = self.decode(run_id, row, checked=checked)
            try:
                if row.snapshot:
                    document = payload["document"]
                    if not isinstance(document, dict):
                        raise TypeError("the document is not an object")
                else:
                    _apply(document, payload["ops"])
            except (LookupError, TypeError, ValueError, AttributeError) as exc:
                raise self.corrupt(run_id, f"cannot be applied ({exc})", seq=row.seq) from None
            expected += 1
        if rows[-1].seq != record.seq:
            raise self.corrupt(
                run_id, f"is missing (the registry's last is {record.seq})", seq=rows[-1].seq + 1
            )
        return record.seq, document

    def effect_record(self, row: _EffectRow) -> EffectRecord:
        result = None
        if row.blob is not None:
            payload = self.unseal(
                row.blob, _effect_aad(row), row.run_id, f"the result of effect {row.key!r}"
            )
            if not isinstance(payload, dict) or payload.get("kind") != "effect":
                raise self.corrupt_effect(row, "is not an effect's result")
            result = payload.get("result")
        return EffectRecord(
            key=row.key,
            run_id=row.run_id,
            tool=row.tool,
            args_hash=row.args_hash,
            status=row.status,
            result=result,
            updated_at=row.updated_at,
        )

    def encode(self, run_id: str, seq: int, payload: Mapping[str, Any]) -> bytes:
        return self.seal(payload, _aad(run_id, seq))

    def encode_effect(self, row: _EffectRow, payload: Mapping[str, Any]) -> bytes:
        return self.seal(payload, _effect_aad(row))

    def seal(self, payload: Mapping[str, Any], aad: bytes) -> bytes:
        return self.seal_plain(dumps(payload).encode(), aad)

    def seal_plain(self, plain: bytes, aad: bytes) -> bytes:
        sealed = plain if self.sealer is None else self.sealer.seal(plain, aad=aad)
        return hashlib.sha256(sealed).digest() + sealed

    def decode(self, run_id: str, row: _Row, *, checked: bool = False) -> dict[str, Any]:
        which = f"checkpoint {row.seq}"
        payload = self.unseal(row.blob, _aad(run_id, row.seq), run_id, which, checked=checked)
        kind = "full" if row.snapshot else "delta"
        if not isinstance(payload, dict) or payload.get("kind") != kind:
            raise self.corrupt(run_id, f"is not a {kind} checkpoint", seq=row.seq)
        return payload

    def decode_plain(self, run_id: str, row: _Row) -> dict[str, Any]:
        """``decode(run_id, row, checked=True)`` of a store without a sealer.

        The usual blob (a JSON object in UTF-8, not compressed, ending with its last
        brace) is read by the decoder's scanner directly, without the per-blob work of
        ``json.loads`` or a copy of its bytes; anything else, or anything the scanner
        refuses, goes through :meth:`decode`, which gives the same value or error.
        """
        payload = _scanned(row.blob, _DIGEST, "full" if row.snapshot else "delta")
        if payload is not None:
            return payload
        return self.decode(run_id, row, checked=True)

    def unseal(
        self, blob: bytes, aad: bytes, run_id: str, which: str, *, checked: bool = False
    ) -> JSON:
        """A stored blob's JSON value, checked (checksum: unless ``checked``, the caller
        checked it already), opened (sealer) and decompressed (a large snapshot)."""
        digest, sealed = blob[:_DIGEST], blob[_DIGEST:]
        if not checked and (len(blob) <= _DIGEST or hashlib.sha256(sealed).digest() != digest):
            raise self.damaged(
                run_id, which, "does not match its checksum (truncated or overwritten)"
            )
        if self.sealer is None:
            plain = sealed
        else:
            try:
                plain = self.sealer.open(sealed, aad=aad, run_id=run_id)
            except CheckpointError:
                raise
            except Exception as exc:
                raise self.damaged(run_id, which, f"cannot be unsealed ({exc})") from exc
        if plain[:1] == _ZLIB:
            try:
                plain = zlib.decompress(plain)
            except zlib.error as exc:
                raise self.damaged(run_id, which, f"cannot be decompressed ({exc})") from None
            if plain[:1] == _TEXTS_AFTER:
                try:
                    return _texts_after(plain)
                except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError too
                    raise self.damaged(run_id, which, f"cannot be read ({exc})") from None
        try:
            payload = _loads(plain)
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise self.damaged(run_id, which, f"is not JSON ({exc})") from None
        return payload

    def corrupt_effect(self, row: _EffectRow, problem: str) -> CheckpointCorruptError:
        return self.damaged(row.run_id, f"the result of effect {row.key!r}", problem)

    def damaged(self, run_id: str, which: str, problem: str) -> CheckpointCorruptError:
        return CheckpointCorruptError(
            f"{which} {problem}. Nothing was loaded and nothing in {self.where} was "
            "changed; other runs are unaffected. Restore the store from a backup to "
            "resume this run, or abort it and start it again.",
            run_id=run_id,
        )

    def corrupt(self, run_id: str, problem: str, *, seq: int | None) -> CheckpointCorruptError:
        which = "its checkpoints" if seq is None else f"checkpoint {seq}"
        return self.damaged(run_id, which, problem)
