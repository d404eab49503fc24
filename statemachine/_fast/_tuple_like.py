"""What the run's persistent sequences share: they read, compare, pickle and validate as tuples.

``Transcript`` (the conversation) and ``ActionLog`` (the governor's actions) keep their
items in shared storage so that appending copies nothing already there; to every
reader they are the tuple of their items. This base gives both the tuple's equality,
hash, ``repr`` and pickling, and one pydantic schema: validated from any sequence of
items (kept as it is when it is already one), written as the list of its items, so
the checkpoint's form never depends on the storage. A subclass says how its storage
shows that two instances are the same sequence (``_same_storage``) and names its item
type (``_ITEM``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, TypeVar, cast

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

__all__ = ["TupleLike"]

T = TypeVar("T")


class TupleLike(Sequence[T]):
    """An immutable sequence equal to, hashed as and pickled as the tuple of its items."""

    __slots__ = ()

    _ITEM: ClassVar[type]
    """The item type (a class the schema validates each item as)."""

    def _same_storage(self, other: Any) -> bool:
        """True when ``other`` (of the same class) is known to hold the same items."""
        return False

    def __reversed__(self) -> Iterator[T]:
        return reversed(tuple(self))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, type(self)):
            if self._same_storage(other):
                return True
            return len(other) == len(self) and tuple(self) == tuple(other)
        if isinstance(other, tuple):
            return len(other) == len(self) and tuple(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({list(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (tuple(self),))

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        items = handler.generate_schema(cast(Any, tuple)[cls._ITEM, ...])
        return core_schema.union_schema(
            [
                core_schema.is_instance_schema(cls),
                core_schema.no_info_after_validator_function(cls, items),
            ],
            serialization=core_schema.plain_serializer_function_ser_schema(
                tuple, return_schema=items
            ),
        )
