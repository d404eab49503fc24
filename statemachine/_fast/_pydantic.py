"""A pydantic model made as ``model_construct`` makes it, without its work (see ``_fast``)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from ._making import making_class

__all__ = ["_trusted"]

M = TypeVar("M", bound=BaseModel)


def _trusted(
    cls: type[M],
    values: dict[str, Any],
    fields_set: set[str],
    private: dict[str, Any] | None = None,
) -> M:
    """An instance of ``cls`` holding ``values``, made as ``model_construct`` makes one.

    For the hot path, with values that are valid already (taken from validated models
    or made by the library): nothing is validated and no default is filled in, so
    ``values`` holds every field, in the order the fields are declared (``model_dump``
    follows it). ``fields_set`` is the new instance's own set; ``private`` its private
    attributes (``None`` for a model without any). ``cls`` must not allow extra fields.

    ``cls`` is one of the library's own models (every caller names it): the instance is
    made as ``cls``'s making class (:func:`making_class`, one per class, made at its
    first call here), its four slots stored as ``object`` stores them, then given
    ``cls`` by ``__class__`` assignment: what :func:`_trusted_plain` makes through each
    slot's descriptor, the very values in the very slots, without a call per slot.
    """
    making = _MAKING.get(cls)
    if making is None:
        making = _making(cls)
        if making is None:
            return _trusted_plain(cls, values, fields_set, private)
    model: Any = _new(making)  # a model's __new__ is object's
    model.__dict__ = values
    model.__pydantic_fields_set__ = fields_set
    model.__pydantic_extra__ = None
    model.__pydantic_private__ = private
    model.__class__ = cls
    made: M = model
    return made


def _trusted_plain(
    cls: type[M],
    values: dict[str, Any],
    fields_set: set[str],
    private: dict[str, Any] | None = None,
) -> M:
    """:func:`_trusted`, each slot set through its descriptor (the way for a class that
    has no making class)."""
    model = cls.__new__(cls)
    _set_dict(model, values)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model


# cls -> its making class (the class itself when it has none: _trusted_plain makes it).
_MAKING: dict[type[Any], type[Any]] = {}
_new = object.__new__


def _making(cls: type[Any]) -> type[Any] | None:
    """The making class of ``cls``, made and kept; ``None`` when ``cls`` is not a pydantic
    model made by pydantic's own metaclass, its ``__new__`` not ``object``'s, or when no
    such class may be made (``_trusted_plain`` makes its instances)."""
    kept = _MAKING.get(cls)
    if kept is not None:
        return None if kept is cls else kept
    made: type[Any] = cls
    if (
        type(cls) is type(BaseModel)
        and issubclass(cls, BaseModel)
        and cls.__new__ is object.__new__
    ):
        try:
            made = making_class(cls)
        except Exception:  # no making class: the plain way
            made = cls
    _MAKING[cls] = made
    return None if made is cls else made


# BaseModel's own slots, set through their descriptors: what object.__setattr__ finds for
# these names on any model class, without looking them up on every call.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
