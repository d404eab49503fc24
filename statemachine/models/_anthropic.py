"""A :class:`Model` on Anthropic's Messages API, through the official ``anthropic`` SDK.

The SDK (the ``anthropic`` extra) writes the HTTP request, its headers and version,
and raises typed errors; this adapter maps one :class:`ModelRequest` to one
``messages.create`` call and the answer back to one :class:`ModelReply`:

- ``system`` messages become the request's ``system`` text (the API has no system
  turn), in order; the others become alternating ``user``/``assistant`` turns: an
  assistant's tool calls are ``tool_use`` blocks (with their ids), tool results
  ``tool_result`` blocks of the next user turn; the tools' schemas go as
  ``{"name", "description", "input_schema"}``, and, for a ``constrained`` model, the
  output schema as ``output_config.format``;
- :class:`ModelSettings` (the adapter's own, with the request's over them) become
  ``max_tokens`` (else the adapter's ``max_tokens``; the API needs one),
  ``stop_sequences`` and ``tool_choice`` (``required`` is the API's ``any``;
  ``parallel_tool_calls=False`` its ``disable_parallel_tool_use``); ``extra`` goes as
  the SDK's ``extra_body``. A ``temperature`` or a ``seed`` is refused: the API
  version the SDK sends (2026-10-21) takes no sampling parameters, and never took a
  seed;
- every ``tool_use`` block of the reply becomes a :class:`ToolRequest`, its input
  written back as exact JSON (the body is read with numbers as ``Decimal``); the
  text blocks are the reply's text;
- ``stop_reason`` ``max_tokens`` (and ``model_context_window_exceeded``) is
  ``length``, ``refusal`` is ``refusal``, ``tool_use`` is ``tool_calls``, others
  ``stop``;
- usage becomes :class:`Usage`: input tokens count the cache's reads and writes too,
  all priced by :class:`TokenPrices` at the input price.

Numbers sent (the tools' schemas, past tool inputs) pass through the SDK's JSON
encoder, which knows no ``Decimal``: a whole one goes as an integer, any other as a
float (17 significant digits).

``stream`` asks the same through the SDK's message stream: the ``text_delta`` events
are yielded as they come, then the reply the events make up (a tool call's input
from the exact JSON text of its ``input_json_delta`` events); an ``error`` event in
the stream is mapped by its type, as its status would be.

The SDK's own retries are off (``max_retries=0``): a 408, 409, 429, a 529
(overloaded), another 5xx (but 501) or a connection that fails raises
:class:`ModelUnavailableError` at once (with the server's ``retry-after``), and
whether to try again is the caller's policy (the phases'); another 4xx, or a 501,
raises :class:`ModelRequestError`; a body that is not a message
:class:`ModelResponseError`. The time limit is the smaller of the adapter's
``timeout`` and the run's time left; at the limit the call is cancelled and
:class:`TimeoutError` raised. No SDK exception escapes.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self, final

import anyio

from .. import _json
from .._errors import (
    ModelRequestError,
    ModelResponseError,
    ModelUnavailableError,
    SetupError,
)
from .._model import (
    NO_SETTINGS,
    TOOL_CHOICE_MODES,
    Message,
    ModelChunk,
    ModelReply,
    ModelRequest,
    ModelSettings,
    ToolRequest,
    Usage,
)
from ._prices import TokenPrices
from ._wire import EXCERPT_CHARS as _EXCERPT_CHARS
from ._wire import clip as _clip
from ._wire import retry_after
from ._wire import wire as _wire

if TYPE_CHECKING:
    import anthropic
    from anthropic.lib.streaming import AsyncMessageStream
    from anthropic.types import Message as AnthropicMessage

# The SDK is imported where a client is made, not at the top: building the model's
# request, and importing statemachine.models, need none of it.

__all__ = ["API_KEY_ENV", "DEFAULT_BASE_URL", "AnthropicModel"]

API_KEY_ENV = "ANTHROPIC_API_KEY"
"""The environment variable read for the API key when none is passed."""

DEFAULT_BASE_URL = "https://api.anthropic.com"

_FinishReason = Literal["stop", "length", "refusal", "content_filter", "tool_calls"]
_STOP_REASONS: dict[str, _FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "refusal",
}
# What the adapter writes itself; ``extra`` may not replace it.
_OWN_PARAMETERS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "output_config",
    }
)
# Statuses of a request that may succeed if sent again later (and every 5xx but those
# that say the server cannot do it; 529 is the API's "overloaded").
_TRANSIENT: Final = frozenset({408, 409, 429})
_UNSUPPORTED: Final = frozenset({501, 505})
_NOT_EVENTS = "the stream's events are not a Messages API message"
# The types of an error event in a stream that may pass, as their statuses would.
_TRANSIENT_EVENTS: Final = frozenset(
    {"overloaded_error", "rate_limit_error", "api_error", "timeout_error"}
)


@final
class AnthropicModel:
    """A Claude model behind Anthropic's Messages API.

    ``model`` is the model's name, such as ``"claude-sonnet-4-5"``. The API key is
    ``api_key`` or else the environment variable ``ANTHROPIC_API_KEY``; with neither,
    building the model is a :class:`SetupError`. ``base_url`` is the API's root
    (without ``/v1``). ``max_tokens`` caps a reply when the settings do not;
    ``constrained=True`` sends an output schema as the API's structured output, so
    that an output guard in ``constrained`` mode accepts this model. ``timeout``
    bounds every call, in seconds; ``prices`` turns usage into cost; ``settings``
    are this model's defaults, under each request's.

    ``client`` is an ``anthropic.AsyncAnthropic`` to send with; its owner closes it,
    and it is used with its retries off. Without one, ``async with model:`` keeps one
    client for the block; outside such a block each call opens and closes its own.
    """

    __slots__ = (
        "_api_key",
        "_base_url",
        "_client",
        "_constrained",
        "_max_tokens",
        "_model",
        "_owned",
        "_prices",
        "_settings",
        "_timeout",
        "_url",
    )

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str = DEFAULT_BASE_URL,
        max_tokens: int = 4096,
        constrained: bool = False,
        timeout: float = 60.0,
        prices: TokenPrices | None = None,
        settings: ModelSettings | None = None,
        client: anthropic.AsyncAnthropic | None = None,
    ) -> None:
        url = base_url.rstrip("/")
        if not re.match(r"https?://[^/\s]+", url):
            raise SetupError(
                f"base_url must be an http:// or https:// address such as "
                f"{DEFAULT_BASE_URL!r}, got {base_url!r}"
            )
        if not model.strip():
            raise SetupError(f"model must name a Claude model, got {model!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise SetupError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if type(max_tokens) is not int or max_tokens < 1:
            raise SetupError(f"max_tokens must be a positive whole number, got {max_tokens!r}")
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        if client is None and not key:
            raise SetupError(f"AnthropicModel needs an API key: pass api_key= or set {API_KEY_ENV}")
        self._model = model
        self._api_key = key or ""
        self._base_url = url
        self._url = f"{url}/v1/messages"
        self._max_tokens = max_tokens
        self._constrained = constrained
        self._timeout = float(timeout)
        self._prices = TokenPrices() if prices is None else prices
        self._settings = NO_SETTINGS if settings is None else settings
        self._client = None if client is None else client.with_options(max_retries=0)
        self._owned: anthropic.AsyncAnthropic | None = None

    def __repr__(self) -> str:
        return f"AnthropicModel({self._model!r}, constrained={self._constrained})"

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def base_url(self) -> str:
        """The API's root, without a trailing slash."""
        return self._base_url

    @property
    def constrained(self) -> bool:
        """Whether the API is asked to enforce an output schema while decoding."""
        return self._constrained

    @property
    def timeout(self) -> float:
        """The most seconds one call may take, whatever the run has left."""
        return self._timeout

    @property
    def prices(self) -> TokenPrices:
        """The prices that turn usage into cost."""
        return self._prices

    @property
    def settings(self) -> ModelSettings:
        """This model's default settings, under each request's."""
        return self._settings

    async def __aenter__(self) -> Self:
        if self._client is None and self._owned is None:
            self._owned = self._new_client()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the client this model opened (never an injected one)."""
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.close()

    def parameters(self, request: ModelRequest) -> dict[str, Any]:
        """The keyword arguments of ``messages.create`` for ``request``.

        :class:`SetupError` for an output schema when this model is not
        ``constrained``, a ``temperature`` or ``seed``, a ``tool_choice`` naming a tool
        not offered, or an ``extra`` key the adapter writes itself.
        """
        settings = self._settings.merged(request.settings)
        for name in ("temperature", "seed"):
            if getattr(settings, name) is not None:
                raise SetupError(
                    f"{self!r} was given {name}={getattr(settings, name)}, but the Messages "
                    f"API takes no {name}; leave it out of this model's settings"
                )
        system, turns = _conversation(request.messages)
        out: dict[str, Any] = {
            "model": self._model,
            "max_tokens": settings.max_tokens or self._max_tokens,
            "messages": turns,
        }
        if system:
            out["system"] = system
        if request.tools:
            out["tools"] = [_tool(schema) for schema in request.tools]
            choice = _tool_choice(settings, out["tools"])
            if choice is not None:
                out["tool_choice"] = choice
        if request.output_schema is not None:
            if not self._constrained:
                raise SetupError(
                    f"{self!r} was asked to enforce an output schema but is not "
                    "constrained; pass constrained=True for a model that supports structured "
                    "outputs, or use guard mode 'auto_repair' or 'reject'"
                )
            format_ = {"type": "json_schema", "schema": _wire(request.output_schema)}
            out["output_config"] = {"format": format_}
        if settings.stop is not None:
            out["stop_sequences"] = list(settings.stop)
        if settings.extra:
            taken = sorted(_OWN_PARAMETERS & set(settings.extra))
            if taken:
                raise SetupError(
                    f"the settings' extra would replace {', '.join(map(repr, taken))}, which "
                    "this adapter writes itself from the request and its settings; set the "
                    "ModelSettings field or the request's part instead"
                )
            out["extra_body"] = _wire(settings.extra)
        return out

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and read the reply, within the adapter's and the run's time.

        Raises :class:`TimeoutError` (the request is cancelled), or
        :class:`ModelUnavailableError`, :class:`ModelRequestError` or
        :class:`ModelResponseError`.
        """
        parameters = self.parameters(request)
        limit = self._limit(request)
        async with self._sdk() as client:
            with self._timed(limit), anyio.fail_after(limit), self._sdk_errors():
                raw = await client.messages.with_raw_response.create(**parameters, timeout=limit)
                body = bytes(raw.http_response.content)
        return self._read(body)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """:meth:`complete`, streamed: the text as the API writes it, then the reply.

        The SDK's message stream puts the events together; a tool call's input is the
        exact JSON text its ``input_json_delta`` events sent. The same time limit bounds
        the whole stream, and the same errors are raised; an error event in the stream
        (``overloaded_error``, ...) or a stream that stops before ``message_stop``
        raises :class:`ModelUnavailableError`.
        """
        parameters = self.parameters(request)
        limit = self._limit(request)
        deadline = anyio.current_time() + limit
        async with self._sdk() as client, AsyncExitStack() as stack:
            with self._timed(limit), anyio.fail_after(limit), self._sdk_errors():
                events = await client.messages.stream(**parameters, timeout=limit).__aenter__()
            stack.push_async_callback(_shut, events)
            inputs: dict[int, str] = {}  # a tool_use block's index: its input's JSON text
            started = stopped = False
            while not stopped:
                with (
                    self._timed(limit),
                    anyio.fail_after(deadline - anyio.current_time()),
                    self._sdk_errors(),
                ):
                    event = await anext(events, None)
                if event is None:
                    break
                started = started or event.type == "message_start"
                stopped = event.type == "message_stop"
                if event.type == "text" and event.text:
                    yield ModelChunk(text=event.text)
                elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                    inputs[event.index] = inputs.get(event.index, "") + event.delta.partial_json
            if not stopped:
                raise ModelUnavailableError(
                    "the stream ended before the answer did (no message_stop)",
                    url=self._url,
                    status=200,
                )
            if not started:
                raise ModelResponseError(_NOT_EVENTS + " (no message_start)", url=self._url)
            yield ModelChunk(reply=self._reply(events.current_message_snapshot, b"", inputs))

    def _limit(self, request: ModelRequest) -> float:
        """The seconds this call may take; :class:`TimeoutError` when none are left."""
        limit = self._timeout if request.timeout is None else min(self._timeout, request.timeout)
        if limit <= 0:
            raise TimeoutError(f"no time was left to ask the model at {self._url}")
        return limit

    @contextmanager
    def _timed(self, limit: float) -> Generator[None]:
        """The ``TimeoutError`` of a call that ran past ``limit``, saying so."""
        try:
            yield
        except TimeoutError:
            raise TimeoutError(
                f"the model at {self._url} did not answer within {limit:.2f}s; "
                "the request was cancelled"
            ) from None

    @asynccontextmanager
    async def _sdk(self) -> AsyncGenerator[anthropic.AsyncAnthropic]:
        """The client to send with: the injected one, the block's, or one of its own,
        closed when the call ends (even when the deadline cancelled it)."""
        client = self._client or self._owned
        if client is not None:
            yield client
            return
        fresh = self._new_client()
        try:
            yield fresh
        finally:
            with anyio.CancelScope(shield=True):
                await fresh.close()

    def _new_client(self) -> anthropic.AsyncAnthropic:
        try:
            import anthropic
        except ImportError:
            raise SetupError(
                "AnthropicModel needs the anthropic package: "
                "pip install 'statemachine-agents[anthropic]'"
            ) from None
        # Retries belong to the run's policy, never to the SDK.
        return anthropic.AsyncAnthropic(
            api_key=self._api_key, base_url=self._base_url, max_retries=0
        )

    @contextmanager
    def _sdk_errors(self) -> Generator[None]:
        """The SDK's errors (and its transport's, while a stream is read) as the library's."""
        import anthropic
        import httpx2  # the anthropic SDK's HTTP client; a stream's reads raise its errors

        try:
            yield
        except json.JSONDecodeError:
            raise ModelResponseError("an event's data is not JSON", url=self._url) from None
        except (anthropic.APITimeoutError, httpx2.TimeoutException) as error:
            raise TimeoutError(str(error) or "timed out") from error
        except anthropic.APIStatusError as error:
            raise self._refused(error) from error
        except (anthropic.APIConnectionError, httpx2.HTTPError) as error:
            cause = error.__cause__ if isinstance(error, anthropic.APIConnectionError) else None
            detail = str(cause or error) or type(cause or error).__name__
            raise ModelUnavailableError(detail, url=self._url) from error
        except (AttributeError, TypeError, KeyError, IndexError) as problem:
            # The SDK builds events without validating them; its accumulator then fails.
            detail = f"{_NOT_EVENTS} ({type(problem).__name__}: {problem})"
            raise ModelResponseError(detail, url=self._url) from None

    def _refused(self, error: anthropic.APIStatusError) -> Exception:
        """The error for an answer with an error status, or an error event in a stream."""
        status = error.status_code
        detail = _server_message(error)
        if status < 300:  # an error event, after the stream's 200: its type says which
            if _error_type(error) in _TRANSIENT_EVENTS:
                detail = f"the stream broke off with an error: {detail}"
                return ModelUnavailableError(detail, url=self._url, status=status)
            return ModelRequestError(detail, url=self._url, status=status)
        if status in _TRANSIENT or (status >= 500 and status not in _UNSUPPORTED):
            wait = retry_after(error.response.headers)
            return ModelUnavailableError(detail, url=self._url, status=status, retry_after=wait)
        return ModelRequestError(detail, url=self._url, status=status)

    def _read(self, body: bytes) -> ModelReply:
        from anthropic.types import Message as AnthropicMessage
        from pydantic import ValidationError

        try:
            document = _json.loads(body, bounded=True)
        except (ValueError, RecursionError):
            raise self._malformed(body, "the body is not JSON") from None
        try:
            message = AnthropicMessage.model_validate(document)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(map(str, first["loc"])) or "the body"
            raise self._malformed(body, f"{where}: {first['msg']}") from None
        return self._reply(message, body)

    def _reply(
        self, message: AnthropicMessage, body: bytes, inputs: dict[int, str] | None = None
    ) -> ModelReply:
        """The reply ``message`` holds; ``inputs``: a streamed tool_use block's input text,
        by the block's index, which is read exactly (the SDK's own reading is floats)."""
        texts: list[str] = []
        calls: list[ToolRequest] = []
        for index, block in enumerate(message.content):
            if block.type == "text":
                texts.append(block.text)
            elif block.type == "tool_use":
                streamed = None if inputs is None else inputs.get(index)
                arguments = _json.dumps(block.input) if streamed is None else _exact(streamed)
                calls.append(ToolRequest(name=block.name, arguments=arguments, id=block.id))
        # A reason that is missing, or newer than this adapter: say what the reply holds.
        held: _FinishReason = "tool_calls" if calls else "stop"
        finish = _STOP_REASONS.get(message.stop_reason or "", held)
        usage = message.usage
        input_tokens = (
            usage.input_tokens
            + (usage.cache_creation_input_tokens or 0)
            + (usage.cache_read_input_tokens or 0)
        )
        try:
            cost = self._prices.cost(input_tokens, usage.output_tokens)
        except ValueError as problem:
            raise self._malformed(body, f"usage cannot be priced: {problem}") from None
        return ModelReply(
            text="".join(texts),
            tool_calls=tuple(calls),
            finish_reason=finish,
            usage=Usage(input_tokens=input_tokens, output_tokens=usage.output_tokens, cost=cost),
        )

    def _malformed(self, body: bytes, detail: str) -> ModelResponseError:
        excerpt = _clip(body[:_EXCERPT_CHARS].decode("utf-8", "replace").strip())
        shown = f" (the body starts {excerpt!r})" if excerpt else ""
        return ModelResponseError(
            detail,
            url=self._url,
            excerpt=excerpt,
            message=(
                f"the server at {self._url} did not answer with a Messages API message: "
                f"{detail}{shown}. Check that base_url is the API's root (POST "
                "<base_url>/v1/messages) and that the model supports what was asked."
            ),
        )


# --- the request -----------------------------------------------------------------------


def _conversation(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text, and the other messages as turns of alternating roles."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            if message.content:
                system.append(message.content)
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            # Tool results of one assistant turn go back together, in one user turn.
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
        ]
    # The API refuses an empty text block.
    blocks: list[dict[str, Any]] = []
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _input(call)})
    return blocks


def _input(call: ToolRequest) -> dict[str, Any]:
    """A past call's arguments as the JSON object ``tool_use`` needs.

    Arguments that are not a JSON object (another model's malformed call) go as an
    empty object: the tool result that follows already told the model what was wrong.
    """
    try:
        parsed = _json.loads(call.arguments, bounded=True)
    except (ValueError, RecursionError):
        return {}
    return _wire(parsed) if isinstance(parsed, dict) else {}


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema (name, description, parameters) as a Messages API tool."""
    if schema.get("type") == "function" and isinstance(schema.get("function"), dict):
        schema = schema["function"]
    out: dict[str, Any] = {
        "name": schema.get("name", ""),
        "input_schema": _wire(schema.get("parameters") or {"type": "object"}),
    }
    if schema.get("description"):
        out["description"] = schema["description"]
    return out


def _tool_choice(settings: ModelSettings, tools: list[dict[str, Any]]) -> dict[str, Any] | None:
    choice = settings.tool_choice
    out: dict[str, Any]
    if choice is None:
        out = {"type": "auto"}
    elif choice in TOOL_CHOICE_MODES:
        out = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
    else:
        offered = [tool["name"] for tool in tools]
        if choice not in offered:
            raise SetupError(
                f"tool_choice names the tool {choice!r}, which this request does not offer "
                f"(it offers {', '.join(map(repr, offered))}); name one of those, or use "
                f"one of {', '.join(map(repr, TOOL_CHOICE_MODES))}"
            )
        out = {"type": "tool", "name": choice}
    if settings.parallel_tool_calls is not None and out["type"] != "none":
        out["disable_parallel_tool_use"] = not settings.parallel_tool_calls
    if choice is None and len(out) == 1:
        return None  # nothing set: the API's default
    return out


# --- errors ----------------------------------------------------------------------------


def _server_message(error: anthropic.APIStatusError) -> str:
    """The API's own words: ``{"type": "error", "error": {"type", "message"}}``."""
    body = error.body
    said = body.get("error") if isinstance(body, dict) else None
    message = said.get("message") if isinstance(said, dict) else None
    if isinstance(message, str) and message:
        return _clip(message)
    if error.status_code < 300:  # an event of a stream, whose body is not read as a whole
        return _clip(str(body)) or "no message"
    text = error.response.text.strip()
    return _clip(text) or error.response.reason_phrase or "no message"


def _error_type(error: anthropic.APIStatusError) -> str:
    body = error.body
    said = body.get("error") if isinstance(body, dict) else None
    kind = said.get("type") if isinstance(said, dict) else None
    return kind if isinstance(kind, str) else ""


def _exact(text: str) -> str:
    """A streamed tool input's JSON text, written as a non-streamed reply's is; the text
    as it came when it is not JSON (cut off at ``max_tokens``)."""
    try:
        return _json.dumps(_json.loads(text, bounded=True))
    except (ValueError, RecursionError):
        return text


async def _shut(events: AsyncMessageStream[Any]) -> None:
    """Close a stream's response, even while the reader is being cancelled."""
    with anyio.CancelScope(shield=True):
        await events.close()
