"""Plain text for the fields of frozen attrs classes, shared by messages and action records."""

from __future__ import annotations

__all__ = ["plain_text"]


def plain_text(value: object, owner: str, field: str) -> str:
    """``value`` as plain text: a ``str`` as it is, a subclass of ``str`` made a ``str`` (as
    pydantic did), anything else a ``TypeError`` naming ``owner``'s ``field``.

    Each field keeps a named converter that calls this one: mypy's attrs plugin reads only
    named functions, types and lambdas as converters.
    """
    if type(value) is str:
        return value
    if isinstance(value, str):
        return str.__str__(value)
    raise TypeError(f"{owner}'s {field} is text (str), got {type(value).__name__}")
