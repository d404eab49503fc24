"""What a class answers once, kept by the class's id instead of in a weak map (see ``_fast``)."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["_PerClass", "_per_class"]

T = TypeVar("T")

# Answers by the id of the class asked, each with a weak reference to that class: an entry
# whose class is gone (and whose id a new class may have taken) is never read as its.
_PerClass = dict[int, tuple[weakref.ref[type[Any]], T]]


def _per_class(memo: _PerClass[T], cls: type[Any], read: Callable[[type[Any]], T]) -> T:
    """``read(cls)``, read once per class and kept in ``memo``.

    A ``weakref.WeakKeyDictionary`` look-up makes a weak reference of the key at each
    call (a Python method); this one is a dict look-up and a call of the kept reference.
    The entry goes when its class does (an agent factory that makes classes per call
    keeps neither them nor their answers), and until then it is read only for the very
    class it was made for (its id may be another's afterwards). ``read`` must answer
    the same for the same class (it is asked again only when the class it answered for
    is gone). An error of ``read`` is raised and nothing is kept.
    """
    key = id(cls)
    known = memo.get(key)
    if known is not None and known[0]() is cls:
        return known[1]
    value = read(cls)

    def forget(ref: weakref.ref[type[Any]]) -> None:
        entry = memo.get(key)
        if entry is not None and entry[0] is ref:
            del memo[key]

    memo[key] = (weakref.ref(cls, forget), value)
    return value
