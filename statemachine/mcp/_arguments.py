"""The arguments of an MCP tool: a pydantic model made at run time from the tool's JSON schema.

The library's tools take one pydantic model of their arguments; an MCP tool publishes a
JSON schema instead. :func:`arguments_model` makes a model class per tool that keeps the
arguments as they were given (``extra="allow"``), checks them against the published
schema with ``jsonschema`` before anything is sent, and shows the model the schema the
server published (``model_json_schema``). A call the schema refuses raises pydantic's
``ValidationError``, so the registry turns it into an ``InvalidCall``: feedback to the
model, as for any other tool.

Numbers: the model's JSON numbers arrive as exact ``Decimal``. A whole number becomes an
``int`` (so ``5.0`` is an integer, as JSON Schema counts it); a fraction stays a
``Decimal`` in the call (its hash, checkpoint and log are exact) and is sent to the
server as the nearest JSON number (:func:`to_wire`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any, ClassVar

import jsonschema
import jsonschema.validators
from pydantic import BaseModel, ConfigDict, create_model, model_validator
from pydantic_core import PydanticCustomError

from .._errors import SetupError

__all__ = ["MCPArguments", "arguments_model", "to_wire"]

# How many of the schema's complaints a refused call lists (the model reads them all).
_SHOWN = 8


def _whole(value: Any) -> Any:
    """``value`` with whole ``Decimal`` numbers as ``int``, at any depth."""
    if isinstance(value, Decimal):
        if value.is_finite() and value == value.to_integral_value():
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_whole(item) for item in value]
    return value


def to_wire(value: Any) -> Any:
    """``value`` as the JSON the server is sent: a ``Decimal`` fraction as a float."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, Mapping):
        return {key: to_wire(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [to_wire(item) for item in value]
    return value


def _is_number(_: Any, instance: Any) -> bool:
    return isinstance(instance, int | float | Decimal) and not isinstance(instance, bool)


# JSON Schema's "number" also counts a Decimal (the model's exact numbers); its "integer"
# a whole Decimal never reaches: _whole made it an int.
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("number", _is_number)
_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, type_checker=_TYPES
)


def _where(error: jsonschema.ValidationError) -> str:
    return ".".join(str(part) for part in error.absolute_path) or "(arguments)"


class MCPArguments(BaseModel):
    """The arguments of one MCP tool, checked against the schema its server published.

    A subclass per tool is made by :func:`arguments_model`; the arguments are its
    extra fields (``args.model_dump()`` gives them back).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    # Set on each subclass: the tool's name and published schema, and its validator.
    mcp_tool: ClassVar[str] = ""
    mcp_schema: ClassVar[dict[str, Any]] = {"type": "object"}
    _mcp_validator: ClassVar[Any] = None

    @model_validator(mode="before")
    @classmethod
    def _check_schema(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise PydanticCustomError("mcp_arguments", "the arguments must be a JSON object")
        arguments = _whole(data)
        validator = cls._mcp_validator
        if validator is None:
            return arguments
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            shown = "; ".join(f"{_where(error)}: {error.message}" for error in errors[:_SHOWN])
            more = f" (and {len(errors) - _SHOWN} more)" if len(errors) > _SHOWN else ""
            raise PydanticCustomError(
                "mcp_schema",
                "{problems}",
                {"problems": f"refused by the tool's JSON schema: {shown}{more}"},
            )
        return arguments

    @classmethod
    def model_json_schema(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The JSON schema the server published for the tool (what the model is shown)."""
        return dict(cls.mcp_schema)


def arguments_model(tool: str, schema: Mapping[str, Any]) -> type[MCPArguments]:
    """A model class for the arguments of ``tool``, checked against ``schema``.

    Raises :class:`SetupError` when ``schema`` is not a valid JSON schema of an object
    (the server published a broken tool: it cannot be called safely).
    """
    published = dict(schema)
    if published.get("type", "object") != "object":
        raise SetupError(
            f"MCP tool {tool!r} publishes an input schema of type {published.get('type')!r}; "
            "a tool's arguments must be a JSON object. Leave the tool out (exclude=) or fix "
            "the server"
        )
    try:
        _Validator.check_schema(published)
    except jsonschema.SchemaError as error:
        raise SetupError(
            f"MCP tool {tool!r} publishes an input schema that is not valid JSON Schema "
            f"({error.message}); leave the tool out (exclude=) or fix the server"
        ) from None
    model = create_model(f"MCPArguments_{_identifier(tool)}", __base__=MCPArguments)
    model.mcp_tool = tool
    model.mcp_schema = published
    model._mcp_validator = _Validator(published)
    return model


def _identifier(name: str) -> str:
    return "".join(char if char.isalnum() else "_" for char in name)
