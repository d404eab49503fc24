"""The loop governor's record of a run's tool calls: :class:`ActionRecord` for one call,
and :class:`ActionLog`, an immutable sequence of them that grows by sharing, so that
recording or settling a call costs the same at any length of the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from itertools import chain, islice
from typing import Any, ClassVar, Final, Literal, cast, final, overload

import attrs
from pydantic import GetCoreSchemaHandler
from pydantic_core import SchemaSerializer, core_schema, to_json

from ._fast._making import making_class
from ._fast._tuple_like import TupleLike
from ._plain import plain_text

__all__ = [
    "CHUNK",
    "EMPTY_LOG",
    "_EFFECTS",
    "_OUTCOMES",
    "_RECORD_FIELDS",
    "ActionLog",
    "ActionRecord",
    "_record",
]


_EFFECTS: Final = ("read", "write")
_OUTCOMES: Final = ("pending", "ok", "failed", "refused", "suppressed")
_RECORD_FIELDS: Final = (
    "call_id",
    "tool",
    "effect",
    "exact",
    "key",
    "text",
    "outcome",
    "result",
    "gain",
)


def _call_id_text(value: object) -> str:
    return plain_text(value, "an action record", "call_id")


def _tool_text(value: object) -> str:
    return plain_text(value, "an action record", "tool")


def _exact_text(value: object) -> str:
    return plain_text(value, "an action record", "exact")


def _key_text(value: object) -> str:
    return plain_text(value, "an action record", "key")


def _text_text(value: object) -> str:
    return plain_text(value, "an action record", "text")


def _result_text(value: object) -> str:
    return plain_text(value, "an action record", "result")


def _one_of(choices: tuple[str, ...], field: str) -> Any:
    def check(_: object, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in choices:
            raise ValueError(
                f"an action record's {field} is one of {', '.join(choices)}, got {value!r}"
            )

    return check


def _gain(value: object) -> float | None:
    """A gain as a float (an int is taken as one), or ``None``."""
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise TypeError(f"an action record's gain is a number or None, got {value!r}")
    gain = float(value)
    if not math.isfinite(gain):
        raise ValueError(f"an action record's gain is a finite number or None, got {value!r}")
    return gain


@final
@attrs.frozen(kw_only=True, weakref_slot=False)
class ActionRecord:
    """One tool call the model asked for, and what became of it.

    A slotted frozen class, not a pydantic model: a run holds one for every tool call.
    ``ActionRecord(...)`` checks what it is given (text is ``str``, ``effect`` and
    ``outcome`` one of their words, ``gain`` a number or ``None``); ``model_dump``,
    ``model_dump_json`` and ``model_validate`` read and write the JSON a pydantic model
    of these fields wrote, so checkpoints written before load as they are.
    """

    call_id: str = attrs.field(converter=_call_id_text)
    tool: str = attrs.field(converter=_tool_text)
    effect: Literal["read", "write"] = attrs.field(validator=_one_of(_EFFECTS, "effect"))
    exact: str = attrs.field(converter=_exact_text)
    key: str = attrs.field(converter=_key_text)
    text: str = attrs.field(converter=_text_text)
    outcome: Literal["pending", "ok", "failed", "refused", "suppressed"] = attrs.field(
        default="pending", validator=_one_of(_OUTCOMES, "outcome")
    )
    result: str = attrs.field(default="", converter=_result_text)
    gain: float | None = attrs.field(default=None, converter=_gain)

    __pydantic_serializer__: ClassVar[SchemaSerializer]

    def model_dump(self, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """The record as a dict of its fields, in their order (the same in either mode)."""
        del mode  # every field is text, a word or a float: the same in JSON
        return {
            "call_id": self.call_id,
            "tool": self.tool,
            "effect": self.effect,
            "exact": self.exact,
            "key": self.key,
            "text": self.text,
            "outcome": self.outcome,
            "result": self.result,
            "gain": self.gain,
        }

    def model_dump_json(self) -> str:
        """The record as compact JSON, in its fields' order, written by pydantic's own
        serializer (as the pydantic model wrote it: a float's exponent without a padding
        zero, ``5.960464477539063e-8``, where Python's json writes ``e-08``)."""
        return to_json(self.model_dump()).decode()

    @classmethod
    def model_validate(cls, value: Any) -> ActionRecord:
        """A record from a dict of its fields (or the record itself); ``ValueError`` or
        ``TypeError`` for anything else, naming what is wrong."""
        if isinstance(value, ActionRecord):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"an action record is read from an object of its fields, got {value!r}")
        fields = cast("Mapping[str, Any]", value)
        unknown = set(fields) - _RECORD_NAMES
        if unknown:
            raise ValueError(
                f"an action record has no field {', '.join(sorted(unknown))}; its fields are "
                f"{', '.join(_RECORD_FIELDS)}"
            )
        return cls(**fields)

    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> ActionRecord:
        """This record with the fields in ``update`` changed (checked as a new one is)."""
        return attrs.evolve(self, **(update or {}))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Validated from a record or an object of its fields; written as that object.
        return core_schema.no_info_plain_validator_function(
            cls.model_validate,
            serialization=core_schema.plain_serializer_function_ser_schema(cls.model_dump),
        )


_RECORD_NAMES: Final = frozenset(_RECORD_FIELDS)
# So that pydantic_core's to_jsonable_python (the checkpoint codec's way with a value it
# does not know) writes a record as the object of its fields.
ActionRecord.__pydantic_serializer__ = SchemaSerializer(
    core_schema.any_schema(
        serialization=core_schema.plain_serializer_function_ser_schema(ActionRecord.model_dump)
    )
)

# The record's slots, set through their descriptors as its attrs __init__ sets them, for
# records made from values known valid (the governor's hot path).
_SETTERS: Final = tuple(ActionRecord.__dict__[name].__set__ for name in _RECORD_FIELDS)
_new = object.__new__


# An ActionRecord being made by the library (_record, LoopGovernor.action,
# LoopState._observed): see making_class.
_MakingRecord = making_class(ActionRecord)


def _record(
    call_id: str,
    tool: str,
    effect: str,
    exact: str,
    key: str,
    text: str,
    outcome: str = "pending",
    result: str = "",
    gain: float | None = None,
) -> ActionRecord:
    """``ActionRecord(...)`` for values known valid (text made by the library), unchecked."""
    # Its slots stored as object stores them (_MakingRecord), then the record's own class.
    making: Any = _new(_MakingRecord)
    making.call_id = call_id
    making.tool = tool
    making.effect = effect
    making.exact = exact
    making.key = key
    making.text = text
    making.outcome = outcome
    making.result = result
    making.gain = gain
    making.__class__ = ActionRecord
    made: ActionRecord = making
    return made


# How many records a full chunk holds: an append or a replace copies at most one chunk
# (and, once a chunk in CHUNK, the tuple of chunks).
CHUNK: Final = 32

_Chunk = tuple[ActionRecord, ...] | str


def _unread(text: str) -> tuple[ActionRecord, ...]:
    raise RuntimeError("an action log holds a chunk as text, and no reader is set")


# A full chunk is a tuple of records or, in a log loaded from a checkpoint, the chunk's
# JSON text, read (through ``persist``'s reader, which it sets here, and which keeps
# what it read) when a record of it is first needed. Either is immutable.
_chunk_reader: Callable[[str], tuple[ActionRecord, ...]] = _unread


def _records_of(chunk: _Chunk) -> tuple[ActionRecord, ...]:
    return chunk if type(chunk) is tuple else _chunk_reader(cast(str, chunk))


@final
class ActionLog(TupleLike[ActionRecord]):
    """The actions of a :class:`LoopState`, oldest first; read it as a tuple.

    It indexes, slices (a slice is a tuple), iterates, has a length, and is equal to an
    action log or a tuple holding the same records. :meth:`appended` and
    :meth:`replaced` return a new log that shares this one's records: full chunks of
    ``CHUNK`` records are shared as they are, and only the last, partly filled one is
    copied. Validated from any sequence of records, written as the list of them (the
    checkpoint's form does not depend on the chunks).
    """

    # ``_grown`` is ``None``, or, on a log :meth:`appended` made within a chunk or
    # :meth:`replaced` made with its last record replaced, the pair (the tail it was
    # made from, the tail it made): while this ``_tail`` is that very tail, it holds the
    # tail before's records first (all of them, or all but the last), the very objects,
    # and the checkpoint's producer need not look at them one by one. Only the library's
    # appends and replaces set it (a copy, a pickle or a validation makes the log again
    # through ``__init__``: ``None``).
    __slots__ = ("_chunks", "_grown", "_tail")
    _ITEM = ActionRecord

    _chunks: tuple[_Chunk, ...]
    _tail: tuple[ActionRecord, ...]
    _grown: tuple[tuple[ActionRecord, ...], tuple[ActionRecord, ...]] | None

    def __init__(self, records: Iterable[ActionRecord] = ()) -> None:
        items = tuple(records)
        cut = (len(items) - 1) // CHUNK * CHUNK if items else 0
        self._chunks = tuple(items[at : at + CHUNK] for at in range(0, cut, CHUNK))
        self._tail = items[cut:]
        self._grown = None

    @classmethod
    def _of(
        cls,
        chunks: tuple[_Chunk, ...],
        tail: tuple[ActionRecord, ...],
        grown: tuple[tuple[ActionRecord, ...], tuple[ActionRecord, ...]] | None = None,
    ) -> ActionLog:
        made = cls.__new__(cls)
        made._chunks, made._tail, made._grown = chunks, tail, grown
        return made

    @property
    def chunks(self) -> tuple[tuple[ActionRecord, ...], ...]:
        """The full chunks (``CHUNK`` records each), shared with the logs grown from them."""
        return tuple(map(_records_of, self._chunks))

    @property
    def tail(self) -> tuple[ActionRecord, ...]:
        """The records after the full chunks (1 to ``CHUNK`` of them; none when empty)."""
        return self._tail

    def appended(self, record: ActionRecord) -> ActionLog:
        """This log with ``record`` after it (this one is unchanged)."""
        tail = self._tail
        if len(tail) < CHUNK:
            made = tail + (record,)  # noqa: RUF005
            return ActionLog._of(self._chunks, made, (tail, made))
        return ActionLog._of(self._chunks + (tail,), (record,))  # noqa: RUF005

    def replaced(self, position: int, record: ActionRecord) -> ActionLog:
        """This log with ``record`` at ``position`` (0 <= position < len) instead."""
        chunk, at = divmod(position, CHUNK)
        chunks, tail = self._chunks, self._tail
        if chunk == len(chunks):
            made = tail[:at] + (record,) + tail[at + 1 :]  # noqa: RUF005
            if at == len(tail) - 1:  # the last record replaced
                return ActionLog._of(chunks, made, (tail, made))
            return ActionLog._of(chunks, made)
        old = _records_of(chunks[chunk])
        new = old[:at] + (record,) + old[at + 1 :]  # noqa: RUF005
        return ActionLog._of(chunks[:chunk] + (new,) + chunks[chunk + 1 :], tail)  # noqa: RUF005

    def __len__(self) -> int:
        return len(self._chunks) * CHUNK + len(self._tail)

    @overload
    def __getitem__(self, index: int) -> ActionRecord: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[ActionRecord, ...]: ...
    def __getitem__(self, index: int | slice) -> ActionRecord | tuple[ActionRecord, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                return tuple(self)[index]
            if stop <= start:
                return ()
            return tuple(islice(self._from(start), stop - start))
        length = len(self)
        at = index + length if index < 0 else index
        if not 0 <= at < length:
            raise IndexError(f"action log index {index} out of range (length {length})")
        chunk, inner = divmod(at, CHUNK)
        chunks = self._chunks
        return _records_of(chunks[chunk])[inner] if chunk < len(chunks) else self._tail[inner]

    def _from(self, start: int) -> Iterator[ActionRecord]:
        """The records from ``start`` on, reading only the chunks from there."""
        chunk, inner = divmod(start, CHUNK)
        chunks = self._chunks
        if chunk >= len(chunks):
            return iter(self._tail[inner:])
        rest = chain.from_iterable(map(_records_of, chunks[chunk + 1 :]))  # a slice
        return chain(_records_of(chunks[chunk])[inner:], rest, self._tail)

    def __iter__(self) -> Iterator[ActionRecord]:
        if not self._chunks:
            return iter(self._tail)
        return chain(chain.from_iterable(map(_records_of, self._chunks)), self._tail)

    def _same_storage(self, other: ActionLog) -> bool:
        return other._chunks is self._chunks and other._tail is self._tail


EMPTY_LOG: Final = ActionLog()
"""The log with no action (shared: appending to it copies nothing that is there)."""
