"""A function of a class, answered once per class and found by the class's identity.

``functools.cache``, ``lru_cache`` and a dict keyed by the class find an entry by hash and
``==``: a class whose metaclass makes it hash as, and equal to, a library class
(``Message``, ``Planning``) would be given that class's answer, or put its own answer in
that class's place for everyone after it. ``by_class`` keeps its answers as
``_classes._per_class`` does: by ``id(cls)`` with a weak reference to the class checked at
each look-up, dropped when the class goes (its id may then be another's), so an agent
factory that makes classes per call does not keep them, nor their answers, alive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ._classes import _per_class, _PerClass

__all__ = ["by_class"]

T = TypeVar("T")


def by_class(read: Callable[[Any], T]) -> Callable[[Any], T]:
    """``read``, answering once per class (the very class: see the module's docstring).

    ``read`` must answer the same for the same class. An error of ``read`` is raised and
    nothing is kept.
    """
    memo: _PerClass[T] = {}
    get = memo.get

    def cached(cls: Any) -> T:
        known = get(id(cls))
        if known is not None and known[0]() is cls:
            return known[1]
        return _per_class(memo, cls, read)

    cached.__doc__ = read.__doc__
    return cached
