"""The loop governor's record of a run's tool calls: :class:`ActionRecord` for one call,
and :class:`ActionLog`, an immutable sequence of them that grows by sharing, so that
recording or settling a call costs the same at any length of the run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import chain, islice
from typing import Any, Final, Literal, final, overload

from pydantic import BaseModel, GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["CHUNK", "EMPTY_LOG", "ActionLog", "ActionRecord"]


class ActionRecord(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """One tool call the model asked for, and what became of it."""

    call_id: str
    tool: str
    effect: Literal["read", "write"]
    exact: str
    key: str
    text: str
    outcome: Literal["pending", "ok", "failed", "refused", "suppressed"] = "pending"
    result: str = ""
    gain: float | None = None


# How many records a full chunk holds: an append or a replace copies at most one chunk
# (and, once a chunk in CHUNK, the tuple of chunks).
CHUNK: Final = 32


@final
class ActionLog(Sequence[ActionRecord]):
    """The actions of a :class:`LoopState`, oldest first; read it as a tuple.

    It indexes, slices (a slice is a tuple), iterates, has a length, and is equal to an
    action log or a tuple holding the same records. :meth:`appended` and
    :meth:`replaced` return a new log that shares this one's records: full chunks of
    ``CHUNK`` records are shared as they are, and only the last, partly filled one is
    copied. Validated from any sequence of records, written as the list of them (the
    checkpoint's form does not depend on the chunks).
    """

    __slots__ = ("_chunks", "_tail")

    _chunks: tuple[tuple[ActionRecord, ...], ...]
    _tail: tuple[ActionRecord, ...]

    def __init__(self, records: Iterable[ActionRecord] = ()) -> None:
        items = tuple(records)
        cut = (len(items) - 1) // CHUNK * CHUNK if items else 0
        self._chunks = tuple(items[at : at + CHUNK] for at in range(0, cut, CHUNK))
        self._tail = items[cut:]

    @classmethod
    def _of(
        cls, chunks: tuple[tuple[ActionRecord, ...], ...], tail: tuple[ActionRecord, ...]
    ) -> ActionLog:
        made = cls.__new__(cls)
        made._chunks, made._tail = chunks, tail
        return made

    @property
    def chunks(self) -> tuple[tuple[ActionRecord, ...], ...]:
        """The full chunks (``CHUNK`` records each), shared with the logs grown from them."""
        return self._chunks

    @property
    def tail(self) -> tuple[ActionRecord, ...]:
        """The records after the full chunks (1 to ``CHUNK`` of them; none when empty)."""
        return self._tail

    def appended(self, record: ActionRecord) -> ActionLog:
        """This log with ``record`` after it (this one is unchanged)."""
        tail = self._tail
        if len(tail) < CHUNK:
            return ActionLog._of(self._chunks, tail + (record,))  # noqa: RUF005
        return ActionLog._of(self._chunks + (tail,), (record,))  # noqa: RUF005

    def replaced(self, position: int, record: ActionRecord) -> ActionLog:
        """This log with ``record`` at ``position`` (0 <= position < len) instead."""
        chunk, at = divmod(position, CHUNK)
        chunks, tail = self._chunks, self._tail
        if chunk == len(chunks):
            return ActionLog._of(chunks, tail[:at] + (record,) + tail[at + 1 :])  # noqa: RUF005
        old = chunks[chunk]
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
        return chunks[chunk][inner] if chunk < len(chunks) else self._tail[inner]

    def _from(self, start: int) -> Iterator[ActionRecord]:
        """The records from ``start`` on, reading only the chunks from there."""
        chunk, inner = divmod(start, CHUNK)
        chunks = self._chunks
        if chunk >= len(chunks):
            return iter(self._tail[inner:])
        rest = chain.from_iterable(chunks[chunk + 1 :])  # a slice: islice would walk
        return chain(chunks[chunk][inner:], rest, self._tail)

    def __iter__(self) -> Iterator[ActionRecord]:
        if not self._chunks:
            return iter(self._tail)
        return chain(chain.from_iterable(self._chunks), self._tail)

    def __reversed__(self) -> Iterator[ActionRecord]:
        return reversed(tuple(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ActionLog):
            if other._chunks is self._chunks and other._tail is self._tail:
                return True
            return len(other) == len(self) and tuple(self) == tuple(other)
        if isinstance(other, tuple):
            return len(other) == len(self) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"ActionLog({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActionLog, (tuple(self),))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        # Validated from any sequence of records, kept as it is when it is a log; written
        # as the list of its records.
        items = handler.generate_schema(tuple[ActionRecord, ...])
        return core_schema.union_schema(
            [
                core_schema.is_instance_schema(cls),
                core_schema.no_info_after_validator_function(cls, items),
            ],
            serialization=core_schema.plain_serializer_function_ser_schema(
                tuple, return_schema=items
            ),
        )


EMPTY_LOG: Final = ActionLog()
"""The log with no action (shared: appending to it copies nothing that is there)."""
