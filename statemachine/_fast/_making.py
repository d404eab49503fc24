"""The private class a maker makes a library object as, before giving it its own class."""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["making_class"]

T = TypeVar("T")


def making_class(cls: type[T]) -> type[T]:
    """A subclass of ``cls`` that sets and deletes attributes as ``object`` does.

    A maker (``_actions._record``, ``_budget._spend``, ``_governor._suppress``,
    ``_tools`` ``route``, ``_fast._messages._message`` / ``_request`` /
    ``_model_request``) makes its object as this class (``object.__new__``), sets its
    slots with plain stores (the interpreter's own slot store, where the frozen class's
    ``__setattr__`` refuses them and each descriptor's ``__set__`` costs a call), then
    makes it a ``cls`` by ``__class__`` assignment. It is safe because: the subclass
    adds no slots (``__slots__ = ()``), so its layout is ``cls``'s and the assignment is
    accepted, leaving exactly a ``cls`` with the very values stored; the object is never
    seen as this class outside its maker, and nothing of a user's runs between (the
    classes given are the library's own, final or not derived by a user on this path);
    and every fast path checks exact classes (``type(x) is C``), so an instance of this
    class made by anyone else is not a ``cls`` to them: it takes the plain way and gains
    nothing.

    Made with ``cls``'s own metaclass (``type`` for attrs classes, pydantic's
    ``ModelMetaclass`` for ``ToolRequest`` / ``ModelRequest``), as the class statement
    ``class _MakingX(cls): __slots__ = (); __setattr__ = object.__setattr__; ...``
    would make it; once per class, at import.
    """
    name = f"_Making{cls.__name__}"
    namespace: dict[str, Any] = {
        "__slots__": (),
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        "__module__": cls.__module__,
        "__qualname__": name,
        "__doc__": f"A ``{cls.__name__}`` being made (see :func:`making_class`).",
    }
    metaclass: Any = type(cls)  # type, or pydantic's ModelMetaclass
    made: type[T] = metaclass(name, (cls,), namespace)
    return made
