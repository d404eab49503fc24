"""A pydantic model made as ``model_construct`` makes it, without its work (see ``_fast``)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

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
    """
    model = cls.__new__(cls)
    _set_dict(model, values)
    _set_fields_set(model, fields_set)
    _set_extra(model, None)
    _set_private(model, private)
    return model


# BaseModel's own slots, set through their descriptors: what object.__setattr__ finds for
# these names on any model class, without looking them up on every call.
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
