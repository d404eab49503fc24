"""Tools and their effects.

A tool is an async function over a pydantic arguments model, declared read-only
(:func:`read_tool`) or write (:func:`write_tool`, irreversible: a booking, a
refund). Calling a tool's ``call(args)`` makes a :class:`ReadCall` or a
:class:`WriteCall`: two unrelated classes, so a function that accepts a
``ReadCall`` rejects a ``WriteCall`` at type-check time. ``Planning.call_tool``
takes only ``ReadCall``; a ``WriteCall`` reaches ``ToolCalling`` only through
``AwaitApproval.approve``, which wraps it in an :class:`ApprovedCall` bound to
the approval.

The model names a tool and sends JSON arguments; :meth:`ToolRegistry.route`
validates them and answers ``ReadCall | WriteCall | InvalidCall``, to be routed
with an exhaustive ``match``.
"""

from __future__ import annotations

import hashlib
import inspect
import json
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from decimal import Decimal
from typing import Any, Generic, Literal, TypeVar, final, get_type_hints, overload

import attrs
from pydantic import BaseModel, ValidationError
from typing_extensions import TypeVar as TypeVarWithDefault

from . import _json
from ._errors import BadArgumentsError, SetupError, UnknownToolError
from ._money import to_money
from ._retry import RetryPolicy

__all__ = [
    "InvalidCall",
    "ReadCall",
    "ReadTool",
    "ToolRegistry",
    "WriteCall",
    "WriteTool",
    "current_idempotency_key",
    "idempotency_key",
    "read_tool",
    "write_tool",
]

A = TypeVar("A", bound=BaseModel)
# The arguments model a write call, its approval and its approved call are of. Defaulted
# (PEP 696), so ``WriteCall`` alone is ``WriteCall[Any]``: what the model's routed calls
# are, and what an approval for another tool's call can only be refused for at run time.
AM = TypeVarWithDefault("AM", bound=BaseModel, default=Any)
ToolFunction = Callable[[A], Awaitable[Any]]
# Any, not A: a lambda in @write_tool(cost=...) is checked before A is known.
CostFunction = Callable[[Any], Decimal]

DEFAULT_TIMEOUT = 10.0
_FREE = Decimal(0)


def _args_model(fn: Callable[..., Any]) -> type[BaseModel]:
    """The pydantic model that ``fn``'s single parameter is annotated with."""
    if not inspect.iscoroutinefunction(fn):
        raise SetupError(
            f"tool {fn.__name__!r} must be an async function (async def), "
            "so that its deadline can cancel it"
        )
    params = list(inspect.signature(fn).parameters.values())
    try:
        hints = get_type_hints(fn)
    except NameError as error:
        raise SetupError(
            f"tool {fn.__name__!r}: its annotations cannot be resolved ({error}); "
            "define the arguments model at module level before the tool"
        ) from None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if len(params) != 1 or params[0].name not in hints or params[0].kind not in positional:
        raise SetupError(
            f"tool {fn.__name__!r} must take exactly one parameter annotated with a "
            "pydantic model of its arguments, e.g. async def f(args: FArgs) -> ..."
        )
    model = hints[params[0].name]
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SetupError(
            f"tool {fn.__name__!r}: parameter {params[0].name!r} is annotated with "
            f"{model!r}; annotate it with a pydantic BaseModel subclass"
        )
    return model


def _positive_timeout(tool: Any, _: Any, value: float) -> None:
    if not value > 0:  # also refuses NaN
        raise SetupError(f"tool {tool.name!r}: timeout must be more than 0 seconds, got {value}")


@attrs.frozen(kw_only=True)
class _Tool(Generic[A]):
    name: str
    description: str
    args_model: type[A]
    # Private: a write tool object offers no public way to run its function without an
    # approval; only ToolCalling.execute calls it (as ``tool._fn``).
    _fn: ToolFunction[A] = attrs.field(repr=False, alias="fn")
    timeout: float = attrs.field(validator=_positive_timeout)
    retry: RetryPolicy | None
    cost: CostFunction | None = attrs.field(repr=False)

    def schema(self) -> dict[str, Any]:
        """The tool as the model sees it: name, description, JSON schema of arguments."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.args_model.model_json_schema(),
        }

    def price(self, args: BaseModel) -> Decimal:
        """What one call with ``args`` costs against the run's cost budget.

        Raises ``ValueError`` when the cost function returns what is not money
        (``to_money``) or a negative amount, which would give budget back.
        """
        if self.cost is None:
            return _FREE
        price = to_money(self.cost(args))
        if price < 0:
            raise ValueError(
                f"the cost function of tool {self.name!r} priced a call at {price}, below "
                "zero: a price must not be negative, or calls would give budget back; "
                "return Decimal(0) for a free call"
            )
        return price

    def _validate(self, args: A | Mapping[str, Any]) -> A:
        if isinstance(args, self.args_model):
            return args
        if isinstance(args, BaseModel):
            raise BadArgumentsError(
                self.name,
                (f"got {type(args).__name__}, expected {self.args_model.__name__}",),
            )
        try:
            return self.args_model.model_validate(args)
        except ValidationError as error:
            raise BadArgumentsError(self.name, _problems(error)) from None
        except (ValueError, ArithmeticError, RecursionError) as error:
            # A validator deep in the model met a value it could not even compare.
            problem = f"{type(error).__name__}: {error}"
            raise BadArgumentsError(self.name, (problem,)) from None


@final
@attrs.frozen(kw_only=True)
class ReadTool(_Tool[A]):
    """A tool without lasting effects: it may run straight from ``Planning``."""

    effect: Literal["read"] = attrs.field(default="read", init=False)

    def call(self, args: A | Mapping[str, Any]) -> ReadCall:
        """A call of this tool with validated arguments."""
        return ReadCall(tool=self, args=self._validate(args))


@final
@attrs.frozen(kw_only=True)
class WriteTool(_Tool[A]):
    """A tool whose effect cannot be undone: every call waits for an approval.

    ``idempotent=True`` declares that the service behind it honours idempotency
    keys, so a call may be safely retried; otherwise a write is attempted once.
    """

    effect: Literal["write"] = attrs.field(default="write", init=False)
    idempotent: bool = False

    def call(self, args: A | Mapping[str, Any]) -> WriteCall[A]:
        """A call of this tool with validated arguments (still needing approval)."""
        return WriteCall(tool=self, args=self._validate(args))


Tool = ReadTool[Any] | WriteTool[Any]


def _problems(error: ValidationError) -> tuple[str, ...]:
    problems = []
    for item in error.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(arguments)"
        problems.append(f"{where}: {item['msg']}")
    return tuple(problems)


def _describe(tool: str, args: BaseModel) -> str:
    return f"{tool}({_json.canonical(args)})"


# The C encoder with sorted keys writes what _json.canonical writes for text keys, text,
# bools, None and ints of up to _PLAIN_DIGITS digits (canonical spells a larger int, a
# float and a Decimal its own way, and refuses a key that is not text).
_SORTED_C = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)
_INT_BOUND: int = 10**_json._PLAIN_DIGITS


def _canonical(args: BaseModel) -> str:
    """``_json.canonical(args)``: written in C when ``_sorted_c_writes_it`` says it may be."""
    plain = args.model_dump(mode="python")
    if _sorted_c_writes_it(plain):
        return _SORTED_C.encode(plain)
    # canonical(args) writes args.model_dump(mode="python"): this.
    return _json.canonical(plain)


def _sorted_c_writes_it(value: Any) -> bool:
    """Whether ``value`` holds only what the sorted C encoder writes as ``canonical``."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        number: int = value
        return -_INT_BOUND < number < _INT_BOUND
    if kind is dict:
        return all(type(key) is str and _sorted_c_writes_it(item) for key, item in value.items())
    if kind is list or kind is tuple:
        return all(_sorted_c_writes_it(item) for item in value)
    return False


def _effect(kind: type[Any]) -> Callable[[Any, Any, Any], None]:
    def check(call: Any, _: Any, tool: Any) -> None:
        if not isinstance(tool, kind):
            raise SetupError(
                f"{type(call).__name__} needs a {kind.__name__}, got {tool!r}; "
                "make calls with tool.call(args) or ToolRegistry.route()"
            )

    return check


@attrs.frozen(kw_only=True)
class _Call:
    """What every tool call has: the tool, validated arguments, and their hash."""

    args: BaseModel
    args_hash: str = attrs.field(init=False)
    # The canonical JSON that args_hash hashes, kept for the governor's action record.
    _canonical: str = attrs.field(init=False, eq=False, repr=False)

    def __attrs_post_init__(self) -> None:
        try:
            # What _json.canonical_hash(self.args) computes, with the text kept.
            canonical = _canonical(self.args)
            args_hash = hashlib.sha256(canonical.encode()).hexdigest()
        except (ValueError, ArithmeticError) as error:
            raise BadArgumentsError(self.name, (f"not a JSON value: {error}",)) from None
        object.__setattr__(self, "args_hash", args_hash)
        object.__setattr__(self, "_canonical", canonical)

    @property
    def name(self) -> str:
        """The tool's name."""
        # ``tool`` is set by the subclasses.
        return self.tool.name  # type: ignore[attr-defined, no-any-return]  # pyright: ignore[reportAttributeAccessIssue]

    @property
    def key(self) -> str:
        """``tool:hash``: what an approval is bound to."""
        return f"{self.name}:{self.args_hash}"

    def describe(self) -> str:
        """The call as a person reads it: ``tool({canonical arguments})``."""
        return _describe(self.name, self.args)


@final
@attrs.frozen(kw_only=True)
class ReadCall(_Call):
    """A call of a read-only tool."""

    tool: ReadTool[Any] = attrs.field(validator=_effect(ReadTool))


@final
@attrs.frozen(kw_only=True)
class WriteCall(_Call, Generic[AM]):
    """A call of a write tool: can run only once approved.

    Generic in the tool's arguments model (``refund.call(...)`` is a
    ``WriteCall[RefundArgs]``), so that an approval of another tool's call does not
    type-check where the types carry it.
    """

    tool: WriteTool[AM] = attrs.field(validator=_effect(WriteTool))


def idempotency_key(run_id: str, tool: str, args_hash: str) -> str:
    """The key a write call is recorded under in the side-effect ledger: SHA-256 (hex).

    Derived from the run, the tool and the call's canonical arguments (``args_hash``),
    so the same call in the same run always has the same key, across retries and
    resumes, and a service that honours idempotency keys acts on it once.
    """
    return _json.canonical_hash([run_id, tool, args_hash])


_IDEMPOTENCY_KEY: ContextVar[str | None] = ContextVar("idempotency_key", default=None)


def current_idempotency_key() -> str | None:
    """The idempotency key of the write call running now; ``None`` outside a write tool.

    A write tool passes it to its service (an ``Idempotency-Key`` header, say), so
    that a call sent again after a crash is recognised and acts once.
    """
    return _IDEMPOTENCY_KEY.get()


@final
@attrs.frozen(kw_only=True)
class InvalidCall:
    """A tool call from the model that cannot run: unknown tool or bad arguments.

    ``feedback`` is written for the model: what failed and what to send instead.
    """

    name: str
    arguments: str
    problems: tuple[str, ...]
    feedback: str


def _declared(
    function: ToolFunction[Any],
    name: str | None,
    description: str | None,
    timeout: float,
    retry: RetryPolicy | None,
    cost: CostFunction | None,
) -> dict[str, Any]:
    """What both kinds of tool are made of, read off the decorated function."""
    return {
        "name": name or function.__name__,
        "description": description or inspect.getdoc(function) or "",
        "args_model": _args_model(function),
        "fn": function,
        "timeout": timeout,
        "retry": retry,
        "cost": cost,
    }


@overload
def read_tool(fn: ToolFunction[A], /) -> ReadTool[A]: ...
@overload
def read_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
) -> Callable[[ToolFunction[A]], ReadTool[A]]: ...
def read_tool(
    fn: ToolFunction[A] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
) -> ReadTool[A] | Callable[[ToolFunction[A]], ReadTool[A]]:
    """Declare an async function a read-only tool.

    The function takes one argument, annotated with a pydantic model of the
    tool's arguments. ``timeout`` (seconds) bounds each attempt; ``retry``
    overrides the agent's retry policy for this tool; ``cost`` prices a call
    against the run's cost budget.
    """

    def build(function: ToolFunction[A]) -> ReadTool[A]:
        return ReadTool(**_declared(function, name, description, timeout, retry, cost))

    return build(fn) if fn is not None else build


@overload
def write_tool(fn: ToolFunction[A], /) -> WriteTool[A]: ...
@overload
def write_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
    idempotent: bool = False,
) -> Callable[[ToolFunction[A]], WriteTool[A]]: ...
def write_tool(
    fn: ToolFunction[A] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
    idempotent: bool = False,
) -> WriteTool[A] | Callable[[ToolFunction[A]], WriteTool[A]]:
    """Declare an async function a write (irreversible) tool.

    Every call waits in ``AwaitApproval`` until a person approves that exact call.
    Unless ``idempotent=True`` (its service honours idempotency keys) a write is
    attempted once: after any error it may have charged already, so a ``retry``
    policy is accepted only together with ``idempotent=True``.
    """

    def build(function: ToolFunction[A]) -> WriteTool[A]:
        if retry is not None and not idempotent:
            raise SetupError(
                f"write tool {function.__name__!r} has a retry policy but is not idempotent; "
                "a retried write might act twice. Declare idempotent=True if its service "
                "honours idempotency keys, or drop retry="
            )
        declared = _declared(function, name, description, timeout, retry, cost)
        return WriteTool(**declared, idempotent=idempotent)

    return build(fn) if fn is not None else build


@final
class ToolRegistry:
    """The tools of one agent, by name; validates and routes the model's calls."""

    __slots__ = ("_schemas", "_tools")

    def __init__(self, tools: Iterable[Tool]) -> None:
        by_name: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, ReadTool | WriteTool):
                raise SetupError(
                    f"{tool!r} is not a tool; declare it with @read_tool or @write_tool"
                )
            if tool.name in by_name:
                raise SetupError(f"two tools are named {tool.name!r}; tool names must be unique")
            by_name[tool.name] = tool
        self._tools = by_name
        # Built once: a JSON schema per tool is costly and the tools never change.
        self._schemas = tuple(tool.schema() for tool in by_name.values())

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    @property
    def names(self) -> tuple[str, ...]:
        """The tools' names, in the order they were given."""
        return tuple(self._tools)

    def get(self, name: str) -> Tool:
        """The tool called ``name``; :class:`UnknownToolError` if there is none."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(name, self.names) from None

    def schemas(self) -> tuple[dict[str, Any], ...]:
        """Every tool's schema, for the model request."""
        return self._schemas

    def call(self, name: str, arguments: str | Mapping[str, Any]) -> ReadCall | WriteCall:
        """Validate a call in code; raises on an unknown tool or bad arguments."""
        tool = self.get(name)
        if isinstance(arguments, str | bytes):
            arguments = _parse_arguments(name, arguments)
        return tool.call(arguments)

    def route(
        self, name: str, arguments: str | Mapping[str, Any]
    ) -> ReadCall | WriteCall | InvalidCall:
        """Validate a call the model asked for; a bad one becomes an :class:`InvalidCall`.

        JSON numbers are read as exact ``Decimal``. Nothing here raises for bad
        model output: the model is told what to fix instead.
        """
        try:
            raw = arguments if isinstance(arguments, str) else _json.dumps(arguments)
        except (ValueError, TypeError, ArithmeticError) as error:
            problem = f"arguments are not JSON: {error}"
            return InvalidCall(
                name=name,
                arguments=repr(arguments),
                problems=(problem,),
                feedback=f"The arguments for {name} were not accepted: {problem}. "
                f"Call {name} again with arguments that match its schema.",
            )
        try:
            return self.call(name, arguments)
        except UnknownToolError as error:
            return InvalidCall(
                name=name,
                arguments=raw,
                problems=(f"unknown tool {name!r}",),
                feedback=(
                    f"There is no tool named {name!r}. Call one of: "
                    f"{', '.join(error.known) or '(none)'}; or answer without a tool."
                ),
            )
        except BadArgumentsError as error:
            return InvalidCall(
                name=name,
                arguments=raw,
                problems=error.problems,
                feedback=(
                    f"The arguments for {name} were not accepted: "
                    + "; ".join(error.problems)
                    + f". Call {name} again with arguments that match its schema."
                ),
            )


# What ``_json.loads(text, bounded=True)`` reads with, made once: ``json.loads`` with
# hooks makes a new decoder (and its scanner) for every call.
_BOUNDED_DECODER = json.JSONDecoder(
    parse_float=_json._bounded_decimal,
    parse_int=_json._bounded_int,
    parse_constant=_json._refuse_constant,
)


def _parse_arguments(name: str, text: str | bytes) -> Mapping[str, Any]:
    value: _json.JSON
    try:
        # Bytes, and text that starts with a byte-order mark (which json.loads refuses
        # with its own message), go through _json.loads; other text is read as it would.
        if type(text) is str and not text.startswith("\ufeff"):
            value = _BOUNDED_DECODER.decode(text)
        else:
            value = _json.loads(text, bounded=True)
    except (ValueError, ArithmeticError) as error:
        raise BadArgumentsError(name, (f"arguments are not valid JSON ({error})",)) from None
    except RecursionError:
        raise BadArgumentsError(name, ("arguments are nested too deeply",)) from None
    if not isinstance(value, dict):
        raise BadArgumentsError(name, ("arguments must be a JSON object",))
    return value
