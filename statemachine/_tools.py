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
import importlib
import inspect
import json
import types
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from decimal import Decimal
from typing import (
    Any,
    Final,
    Generic,
    Literal,
    Protocol,
    TypeVar,
    final,
    get_type_hints,
    overload,
)

import attrs
from pydantic import BaseModel, ValidationError
from pydantic_core import SchemaValidator
from typing_extensions import TypeVar as TypeVarWithDefault

from . import _json
from ._context import RunContext, _context_param
from ._errors import BadArgumentsError, SetupError, UnknownToolError
from ._fast._canonical import _WRITERS, _plain_canonical, _plain_json, _writer
from ._fast._classes import _per_class
from ._fast._making import making_class
from ._money import to_money
from ._retry import RetryPolicy

__all__ = [
    "ContextToolFunction",
    "InvalidCall",
    "ReadCall",
    "ReadTool",
    "ToolRegistry",
    "WriteCall",
    "WriteTool",
    "_registry",
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
# The dependencies a tool needs (the D of the RunContext[D] it takes). Contravariant: a
# tool that needs a base of the agent's dependencies runs with them, and a tool without
# a context (``object``: it needs nothing) runs with any. Defaulted to Any, so that
# ``ReadTool[Args]`` (written before tools took a context) still means any such tool.
D = TypeVarWithDefault("D", contravariant=True, default=Any)
DT = TypeVar("DT")
ToolFunction = Callable[[A], Awaitable[Any]]
# A tool that also takes its run's context: async def f(args: FArgs, ctx: RunContext[Deps]).
ContextToolFunction = Callable[[A, RunContext[DT]], Awaitable[Any]]
# Any, not A: a lambda in @write_tool(cost=...) is checked before A is known.
CostFunction = Callable[[Any], Decimal]

DEFAULT_TIMEOUT = 10.0
_FREE = Decimal(0)


def _args_model(fn: Callable[..., Any]) -> tuple[type[BaseModel], bool, object]:
    """The pydantic model of ``fn``'s arguments, whether it takes a ``RunContext`` second,
    and the dependencies that context asks for (``object``: none in particular)."""
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
            "define the arguments model (and import RunContext) at module level before "
            "the tool"
        ) from None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if (
        len(params) not in (1, 2)
        or any(param.name not in hints or param.kind not in positional for param in params)
        or (len(params) == 2 and not _context_param(hints[params[1].name])[0])
    ):
        raise SetupError(
            f"tool {fn.__name__!r} must take one parameter annotated with a pydantic model "
            "of its arguments, and may take its run's context second, e.g. async def "
            "f(args: FArgs) -> ... or async def f(args: FArgs, ctx: RunContext[Deps]) -> ..."
        )
    model = hints[params[0].name]
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise SetupError(
            f"tool {fn.__name__!r}: parameter {params[0].name!r} is annotated with "
            f"{model!r}; annotate it with a pydantic BaseModel subclass"
        )
    if len(params) == 1:
        return model, False, object
    return model, True, _context_param(hints[params[1].name])[1]


def _positive_timeout(tool: Any, _: Any, value: float) -> None:
    if not value > 0:  # also refuses NaN
        raise SetupError(f"tool {tool.name!r}: timeout must be more than 0 seconds, got {value}")


@attrs.frozen(kw_only=True)
class _Tool(Generic[A, D]):
    name: str
    description: str
    args_model: type[A]
    # Private: a write tool object offers no public way to run its function without an
    # approval; only ToolCalling.execute calls it (as ``tool._fn``), with the call's
    # RunContext second when ``takes_context``.
    _fn: Callable[..., Awaitable[Any]] = attrs.field(repr=False, alias="fn")
    timeout: float = attrs.field(validator=_positive_timeout)
    retry: RetryPolicy | None
    cost: CostFunction | None = attrs.field(repr=False)
    # Whether the function takes a RunContext second, and the dependencies it asks for
    # there (object: none in particular); read off the function by read_tool/write_tool.
    takes_context: bool = attrs.field(default=False, repr=False)
    deps_type: object = attrs.field(default=object, repr=False)

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
        # A dict (the model's parsed arguments) is no model: straight to validation.
        if type(args) is not dict and isinstance(args, self.args_model):
            return args
        if type(args) is not dict and isinstance(args, BaseModel):
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
class ReadTool(_Tool[A, D]):
    """A tool without lasting effects: it may run straight from ``Planning``."""

    effect: Literal["read"] = attrs.field(default="read", init=False)

    def call(self, args: A | Mapping[str, Any]) -> ReadCall:
        """A call of this tool with validated arguments."""
        return _made(ReadCall, self, self._validate(args))


@final
@attrs.frozen(kw_only=True)
class WriteTool(_Tool[A, D]):
    """A tool whose effect cannot be undone: every call waits for an approval.

    ``idempotent=True`` declares that the service behind it honours idempotency
    keys, so a call may be safely retried; otherwise a write is attempted once.
    """

    effect: Literal["write"] = attrs.field(default="write", init=False)
    idempotent: bool = False

    def call(self, args: A | Mapping[str, Any]) -> WriteCall[A]:
        """A call of this tool with validated arguments (still needing approval)."""
        return _made(WriteCall, self, self._validate(args))


Tool = ReadTool[Any, Any] | WriteTool[Any, Any]


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


def _refuse(value: object) -> object:
    raise TypeError(f"{type(value).__name__} is not written by the sorted C encoder")


def _sorted_chunks() -> Callable[[dict[str, Any]], str]:
    """What ``_SORTED_C.encode`` writes for a dict, with its C encoder made once
    (``encode`` makes a new one at every call, which costs more than writing a small
    call's arguments). Without the check for circular containers: ``_plain_json``
    has walked the value first (a cycle never gets here). Where CPython's ``_json`` is
    missing, ``_SORTED_C.encode`` itself."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return _SORTED_C.encode
    # markers, default, encoder, indent, key separator, item separator, sort_keys,
    # skipkeys, allow_nan: the order of json.encoder's own call.
    chunks = make(None, _refuse, json.encoder.encode_basestring, None, ":", ",", True, False, False)

    def encode(value: dict[str, Any]) -> str:
        return "".join(chunks(value, 0))

    return encode


_sorted_c_dict: Final = _sorted_chunks()


def _canonical(args: BaseModel) -> str:
    """``_json.canonical(args)``: from the model's own values when ``_plain_canonical``
    knows its class, else written in C when ``_plain_json`` says it may be."""
    text = _plain_canonical(args)
    if text is not None:
        return text
    plain = args.model_dump(mode="python")
    if _plain_json(plain):
        return _sorted_c_dict(plain) if type(plain) is dict else _SORTED_C.encode(plain)
    # canonical(args) writes args.model_dump(mode="python"): this.
    return _json.canonical(plain)


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
        canonical, args_hash = _hashed(self.name, self.args)
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


def _hashed(name: str, args: BaseModel) -> tuple[str, str]:
    """The canonical JSON of ``args`` and its SHA-256 (hex): what
    ``_json.canonical_hash(args)`` computes, with the text kept."""
    try:
        canonical = _canonical(args)
        return canonical, _sha256(canonical.encode()).hexdigest()
    except (ValueError, ArithmeticError) as error:
        raise BadArgumentsError(name, (f"not a JSON value: {error}",)) from None


@final
@attrs.frozen(kw_only=True)
class ReadCall(_Call):
    """A call of a read-only tool."""

    tool: ReadTool[Any, Any] = attrs.field(validator=_effect(ReadTool))


@final
@attrs.frozen(kw_only=True)
class WriteCall(_Call, Generic[AM]):
    """A call of a write tool: can run only once approved.

    Generic in the tool's arguments model (``refund.call(...)`` is a
    ``WriteCall[RefundArgs]``), so that an approval of another tool's call does not
    type-check where the types carry it.
    """

    tool: WriteTool[AM, Any] = attrs.field(validator=_effect(WriteTool))


C = TypeVar("C", ReadCall, WriteCall[Any])


def _made(cls: type[C], tool: Any, args: BaseModel) -> C:
    """``cls(tool=tool, args=args)``, made by setting its slots (its attrs ``__init__``
    and post-init cost about as much as the call's canonical text). ``tool`` is the
    tool whose ``call`` this is: a ``ReadTool`` for a ``ReadCall``, a ``WriteTool`` for
    a ``WriteCall`` (the classes are final), so the ``tool`` field's check passes."""
    canonical, args_hash = _hashed(tool.name, args)
    call = _new(cls)
    _set_args(call, args)
    _set_args_hash(call, args_hash)
    _set_canonical(call, canonical)
    _set_tool[cls](call, tool)
    return call


# The calls' slots, set through their descriptors (what attrs' __init__ sets).
_new = object.__new__
_set_args = _Call.__dict__["args"].__set__
_set_args_hash = _Call.__dict__["args_hash"].__set__
_set_canonical = _Call.__dict__["_canonical"].__set__
_set_tool = {kind: kind.__dict__["tool"].__set__ for kind in (ReadCall, WriteCall)}


# A ReadCall / WriteCall being made by route: see making_class.
_MakingRead = making_class(ReadCall)
_MakingWrite = making_class(WriteCall)


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
    function: Callable[..., Awaitable[Any]],
    name: str | None,
    description: str | None,
    timeout: float,
    retry: RetryPolicy | None,
    cost: CostFunction | None,
) -> dict[str, Any]:
    """What both kinds of tool are made of, read off the decorated function."""
    args_model, takes_context, deps_type = _args_model(function)
    return {
        "name": name or function.__name__,
        "description": description or inspect.getdoc(function) or "",
        "args_model": args_model,
        "fn": function,
        "timeout": timeout,
        "retry": retry,
        "cost": cost,
        "takes_context": takes_context,
        "deps_type": deps_type,
    }


class _ReadToolDecorator(Protocol):
    """What ``read_tool(name=..., ...)`` returns: it makes a read tool of a function."""

    @overload
    def __call__(self, fn: ToolFunction[A], /) -> ReadTool[A, object]: ...
    @overload
    def __call__(self, fn: ContextToolFunction[A, DT], /) -> ReadTool[A, DT]: ...


class _WriteToolDecorator(Protocol):
    """What ``write_tool(name=..., ...)`` returns: it makes a write tool of a function."""

    @overload
    def __call__(self, fn: ToolFunction[A], /) -> WriteTool[A, object]: ...
    @overload
    def __call__(self, fn: ContextToolFunction[A, DT], /) -> WriteTool[A, DT]: ...


@overload
def read_tool(fn: ToolFunction[A], /) -> ReadTool[A, object]: ...
@overload
def read_tool(fn: ContextToolFunction[A, DT], /) -> ReadTool[A, DT]: ...
@overload
def read_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
) -> _ReadToolDecorator: ...
def read_tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
) -> ReadTool[Any, Any] | Callable[[Callable[..., Awaitable[Any]]], ReadTool[Any, Any]]:
    """Declare an async function a read-only tool.

    The function takes one argument, annotated with a pydantic model of the
    tool's arguments, and may take its run's context second (``ctx:
    RunContext[Deps]``, see :class:`RunContext`). ``timeout`` (seconds) bounds each
    attempt; ``retry`` overrides the agent's retry policy for this tool; ``cost``
    prices a call against the run's cost budget.
    """

    def build(function: Callable[..., Awaitable[Any]]) -> ReadTool[Any, Any]:
        return ReadTool(**_declared(function, name, description, timeout, retry, cost))

    return build(fn) if fn is not None else build


@overload
def write_tool(fn: ToolFunction[A], /) -> WriteTool[A, object]: ...
@overload
def write_tool(fn: ContextToolFunction[A, DT], /) -> WriteTool[A, DT]: ...
@overload
def write_tool(
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
    idempotent: bool = False,
) -> _WriteToolDecorator: ...
def write_tool(
    fn: Callable[..., Awaitable[Any]] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    retry: RetryPolicy | None = None,
    cost: CostFunction | None = None,
    idempotent: bool = False,
) -> WriteTool[Any, Any] | Callable[[Callable[..., Awaitable[Any]]], WriteTool[Any, Any]]:
    """Declare an async function a write (irreversible) tool.

    Every call waits in ``AwaitApproval`` until a person approves that exact call.
    Unless ``idempotent=True`` (its service honours idempotency keys) a write is
    attempted once: after any error it may have charged already, so a ``retry``
    policy is accepted only together with ``idempotent=True``. Like a read tool, it
    may take its run's context second (whose ``idempotency_key`` is this call's).
    """

    def build(function: Callable[..., Awaitable[Any]]) -> WriteTool[Any, Any]:
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
class ToolRegistry(Generic[D]):
    """The tools of one agent, by name; validates and routes the model's calls.

    Generic in the dependencies its tools may be given (``ToolRegistry[Deps]`` holds
    tools whose ``RunContext`` asks for ``Deps`` or a base of it, and tools without one).
    """

    __slots__ = ("_known", "_schemas", "_tools")

    def __init__(self, tools: Iterable[ReadTool[Any, D] | WriteTool[Any, D]]) -> None:
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
        # What route reads of a tool's arguments class, kept per tool name (see _Known).
        self._known: dict[str, _Known] = {}
        # Built once: a JSON schema per tool is costly and the tools never change.
        self._schemas = tuple(tool.schema() for tool in by_name.values())

    def __getstate__(self) -> tuple[dict[str, Tool], tuple[dict[str, Any], ...]]:
        # Without what route keeps (a class's namespace is a view that does not copy).
        return self._tools, self._schemas

    def __setstate__(self, state: tuple[dict[str, Tool], tuple[dict[str, Any], ...]]) -> None:
        self._tools, self._schemas = state
        self._known = {}

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
        if isinstance(arguments, (str, bytes)):
            arguments = _parse_arguments(name, arguments)
        return tool.call(arguments)

    def route(
        self, name: str, arguments: str | Mapping[str, Any]
    ) -> ReadCall | WriteCall | InvalidCall:
        """Validate a call the model asked for; a bad one becomes an :class:`InvalidCall`.

        JSON numbers are read as exact ``Decimal``. Nothing here raises for bad
        model output: the model is told what to fix instead.
        """
        # The model's usual call, in this one frame: text naming a tool of the library's
        # own classes, a JSON object the scanner reads whole (not nested deeply), and an
        # arguments class that validates as BaseModel.model_validate does. What _route
        # does with it, step for step (the same scan, validation, errors and call);
        # anything else, and a text the scanner cannot read whole, goes through _route.
        tool = self._tools.get(name) if type(name) is str else None
        kind = type(tool)
        # (A text the scanner reads as a dict starts with "{": any other is scanned to
        # another value, or refused, and goes through _route as the text is.)
        if (
            (kind is ReadTool or kind is WriteTool)
            and type(arguments) is str
            and (
                len(arguments) <= _SHALLOW
                or arguments.count("{") + arguments.count("[") <= _SHALLOW
            )
        ):
            try:
                value, end = _scan(arguments, 0)
            except (ValueError, ArithmeticError, RecursionError, StopIteration):
                return self._route(name, arguments)  # its error, as _route reports it
            if end != len(arguments) or type(value) is not dict:
                return self._route(name, arguments)
            known: Tool = tool  # type: ignore[assignment]  # pyright: ignore[reportAssignmentType]
            model: Any = known.args_model
            # What the class's look-ups below answer, read from its own namespace when
            # _learn has seen it answer them (see _Known): the same validator, and no
            # model_validate but BaseModel's.
            # (An entry's five parts read at once; a name not seen yet reads _UNKNOWN's.)
            held, of, space, validator, writer = self._known.get(name, _UNKNOWN)
            if not (
                held is known
                and of is model
                and space is not None
                and _VALIDATE_NAME not in space
                and _VALIDATOR_NAME in space
                and space[_VALIDATOR_NAME] is validator
                and _VALIDATE_NAME in _BASE_SPACE
                and _BASE_SPACE[_VALIDATE_NAME] is _BASE_VALIDATE
            ):
                if held is not known or of is not model or space is not None:
                    self._known[name] = _learn(known, model)
                validate: Any = model.model_validate
                bound: Any = model  # compared as itself (the checkers would narrow model)
                if (
                    type(validate) is not _Method
                    or validate.__func__ is not _MODEL_VALIDATE
                    or validate.__self__ is not bound
                ):
                    return self._called(known, name, arguments, value)
                validator = model.__pydantic_validator__
                writer = _plain_canonical
            try:  # BaseModel.model_validate(model, value), without its frame
                args = validator.validate_python(value)
            except ValidationError as error:
                return _invalid_arguments(name, arguments, _problems(error))
            except (ValueError, ArithmeticError, RecursionError) as error:
                return _invalid_arguments(name, arguments, (f"{type(error).__name__}: {error}",))
            made: Any = ReadCall if kind is ReadTool else WriteCall
            try:  # what _hashed does when _plain_canonical knows the class
                # (the writer _plain_canonical finds for the class, when it is model's)
                canonical = (
                    _plain_canonical(args)
                    if writer is _plain_canonical or type(args) is not model
                    else writer(args)
                    if writer is not None
                    else None
                )
                args_hash = None if canonical is None else _sha256(canonical.encode()).hexdigest()
            except (ValueError, ArithmeticError) as error:
                return _invalid_arguments(name, arguments, (f"not a JSON value: {error}",))
            if canonical is None:  # _made writes it the long way (and reports its errors)
                try:
                    routed: ReadCall | WriteCall = _made(made, known, args)
                except BadArgumentsError as error:
                    return _invalid_arguments(name, arguments, error.problems)
                return routed
            # What _made makes (the classes are final; the tool is of the call's kind): its
            # slots stored as object stores them, then the class the call's own (_Making).
            call: Any = _new(_MakingRead if kind is ReadTool else _MakingWrite)
            call.args = args
            call.args_hash = args_hash
            call._canonical = canonical
            call.tool = known
            call.__class__ = made
            return call  # type: ignore[no-any-return]
        return self._route(name, arguments)

    def _called(
        self, tool: Tool, name: str, arguments: str, value: dict[str, Any]
    ) -> ReadCall | WriteCall | InvalidCall:
        """``tool.call(value)`` for ``route`` (``value``: the parsed arguments), a bad
        call an :class:`InvalidCall` as ``_route`` makes it."""
        try:
            return tool.call(value)
        except BadArgumentsError as error:
            return _invalid_arguments(name, arguments, error.problems)

    def _route(
        self, name: str, arguments: str | Mapping[str, Any]
    ) -> ReadCall | WriteCall | InvalidCall:
        """What ``route`` does, for any name and arguments (its plain path)."""
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
            # What self.call(name, arguments) does, written out (two calls fewer a call).
            tool = self._tools.get(name)
            if tool is None:
                tool = self.get(name)  # raises UnknownToolError
            if isinstance(arguments, (str, bytes)):
                arguments = _parse_arguments(name, arguments)
            return tool.call(arguments)
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
            return _invalid_arguments(name, raw, error.problems)


def _invalid_arguments(name: str, raw: str, problems: tuple[str, ...]) -> InvalidCall:
    """The :class:`InvalidCall` of a known tool's call whose ``raw`` arguments were not
    accepted, for ``problems``."""
    return InvalidCall(
        name=name,
        arguments=raw,
        problems=problems,
        feedback=(
            f"The arguments for {name} were not accepted: "
            + "; ".join(problems)
            + f". Call {name} again with arguments that match its schema."
        ),
    )


# BaseModel.model_validate's function (a classmethod's), and the bound method's class.
_MODEL_VALIDATE: Final = BaseModel.model_validate.__func__  # type: ignore[attr-defined]
_Method: Final = types.MethodType

# What ToolRegistry.route keeps of a tool (by its name), made by _learn: the tool, its
# arguments class, that class's own namespace (a live view), its validator and the
# canonical writer _plain_canonical uses for it (or None); the namespace is None for a
# class route reads through its look-ups at every call.
_Known = tuple[Any, Any, "Mapping[str, Any] | None", Any, Any]
# What route reads for a name it has kept nothing for: no tool is None, so it learns.
_UNKNOWN: Final[_Known] = (None, None, None, None, None)
_VALIDATE_NAME: Final = "model_validate"
_VALIDATOR_NAME: Final = "__pydantic_validator__"
_BASE_SPACE: Final[Mapping[str, Any]] = vars(BaseModel)
_BASE_VALIDATE: Final = _BASE_SPACE[_VALIDATE_NAME]
_MODEL_META: Final = type(BaseModel)


def _learn(tool: Any, model: Any) -> _Known:
    """What route keeps of ``tool``, whose arguments class is ``model``.

    Its namespace is kept only for a class whose look-ups of ``model_validate`` and
    ``__pydantic_validator__`` that namespace decides as long as it holds the same
    entries: a class of pydantic's own metaclass (exactly), made directly from
    ``BaseModel`` (its bases ``BaseModel`` and ``object``), with no ``model_validate`` of
    its own, BaseModel's being the one read at import, and a validator of
    pydantic-core's own class (no descriptor) that the look-up answers itself. Anything
    else: ``None`` in its place, and route looks the class up at every call.
    """
    plain: _Known = (tool, model, None, None, None)
    if type(model) is not _MODEL_META:
        return plain
    space: Mapping[str, Any] = vars(model)
    mro = model.__mro__
    validator = space.get(_VALIDATOR_NAME)
    validate = model.model_validate
    if (
        len(mro) != 3
        or mro[0] is not model
        or mro[1] is not BaseModel
        or mro[2] is not object
        or _VALIDATE_NAME in space
        or _BASE_SPACE.get(_VALIDATE_NAME) is not _BASE_VALIDATE
        or type(validate) is not _Method
        or validate.__func__ is not _MODEL_VALIDATE
        or validate.__self__ is not model
        or type(validator) is not SchemaValidator
        or model.__pydantic_validator__ is not validator
    ):
        return plain
    try:
        writer = _per_class(_WRITERS, model, _writer)
    except Exception:  # _plain_canonical raises it, at its call: looked up then
        return plain
    return (tool, model, space, validator, writer)


def _builtin_sha256() -> Callable[[bytes], Any]:
    """SHA-256 in CPython's own C code (the module ``hashlib`` falls back to: ``_sha2``,
    ``_sha256`` before 3.12): the same digest as OpenSSL's, without OpenSSL's set-up and
    context copy, which cost a small text's hash three times its compression. Where
    neither is built, ``hashlib.sha256``."""
    for module in ("_sha2", "_sha256"):
        try:
            made: Callable[[bytes], Any] = importlib.import_module(module).sha256
        except (ImportError, AttributeError):
            continue
        return made
    return hashlib.sha256


_sha256: Final = _builtin_sha256()
# Arguments route reads in its own frame hold at most this many characters or brackets
# ("{" and "[", in strings too): deeper JSON goes through _route, whose frames the
# scanner's depth is counted with (the recursion limit), so that both read it alike.
_SHALLOW: Final = 64


def _registry(
    tools: ToolRegistry[DT] | Iterable[ReadTool[Any, DT] | WriteTool[Any, DT]],
) -> ToolRegistry[DT]:
    """``tools`` as a registry (``Agent``'s converter: its tools may be given as a list)."""
    return tools if isinstance(tools, ToolRegistry) else ToolRegistry(tools)


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
            value = _decoded(text)
        else:
            value = _json.loads(text, bounded=True)
    except (ValueError, ArithmeticError) as error:
        raise BadArgumentsError(name, (f"arguments are not valid JSON ({error})",)) from None
    except RecursionError:
        raise BadArgumentsError(name, ("arguments are nested too deeply",)) from None
    if not isinstance(value, dict):
        raise BadArgumentsError(name, ("arguments must be a JSON object",))
    return value


# The decoder's scanner (an attribute its __init__ sets): scan_once(text, at) -> (value, end).
_scan: Callable[[str, int], tuple[Any, int]] = vars(_BOUNDED_DECODER)["scan_once"]
_JSON_SPACE = frozenset(" \t\n\r")


def _decoded(text: str) -> Any:
    """``_BOUNDED_DECODER.decode(text)``, its scanner called directly when the text
    starts with its value and ends with it (``decode`` would skip no whitespace around
    it: two regular expression matches and a call fewer). Anything else, and a text the
    scanner cannot read, goes through ``decode``, for its result or its error."""
    if text and text[0] not in _JSON_SPACE:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            return _BOUNDED_DECODER.decode(text)  # raises decode's "Expecting value"
        if end == len(text):
            return value
    return _BOUNDED_DECODER.decode(text)
