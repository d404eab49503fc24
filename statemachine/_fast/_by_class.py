"""A function of a class, answered once per class and found by the class's identity.

``functools.cache``, ``lru_cache`` and a dict keyed by the class find an entry by hash and
``==``: a class whose metaclass makes it hash as, and equal to, a library class
(``Message``, ``Planning``) would be given that class's answer, or put its own answer in
that class's place for everyone after it. ``by_class`` keys its answers by ``id(cls)``
with a weak reference to the class checked at each look-up, and drops an answer when
its class is gone (the class's id may then be another's), so an agent factory that makes
classes per call does not keep them, nor their answers, alive.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["by_class"]

T = TypeVar("T")


def by_class(read: Callable[[Any], T]) -> Callable[[Any], T]:
    """``read``, answering once per class (the very class: see the module's docstring).

    ``read`` must answer the same for the same class. An error of ``read`` is raised and
    nothing is kept.
    """
    memo: dict[int, tuple[weakref.ref[Any], T]] = {}

    def forget(ref: weakref.ref[Any], key: int) -> None:
        known = memo.get(key)
        if known is not None and known[0] is ref:
            del memo[key]

    def cached(cls: Any) -> T:
        known = memo.get(id(cls))
        if known is not None and known[0]() is cls:
            return known[1]
        value = read(cls)
        key = id(cls)
        memo[key] = (weakref.ref(cls, lambda ref: forget(ref, key)), value)
        return value

    cached.__doc__ = read.__doc__
    return cached
