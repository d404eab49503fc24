"""A :class:`Model` that speaks the OpenAI chat-completions protocol over HTTP.

Any server that answers ``POST <base_url>/chat/completions`` works: OpenAI itself,
vLLM, llama.cpp's server, Ollama. The adapter maps one :class:`ModelRequest` to one
HTTP request and the answer back to one :class:`ModelReply`, and decides nothing
else:

- messages go out as the protocol's ``system``/``user``/``assistant`` (with
  ``tool_calls``)/``tool`` (with ``tool_call_id``) messages, the tools' schemas as
  ``{"type": "function", "function": {...}}``, and, for a ``constrained`` model, the
  request's output schema as a strict ``response_format`` (an assistant message that
  only calls tools has ``"content": ""``, which every such server accepts, not
  ``null``, which llama-cpp-python's server refuses);
- a server that refuses ``json_schema`` (a 4xx or 5xx whose message names
  ``response_format`` or ``json_schema``) is asked again at once, once, with
  ``{"type": "json_object", "schema": ...}``, which llama-cpp-python's and llama.cpp's
  servers enforce with a grammar; the model remembers it (``structured_output``) and
  logs it, so later calls go straight to ``json_object``;
- :class:`ModelSettings` (the adapter's own, with the request's over them) become the
  body's ``temperature``, ``max_tokens``, ``seed``, ``stop``, ``tool_choice`` and
  ``parallel_tool_calls`` (these two only when tools are offered), and ``extra`` is
  added as it is;
- a tool call's arguments come back as the exact text the server sent: the agent's
  tool registry validates them, and malformed JSON becomes feedback to the model
  there; nothing here parses or repairs them;
- ``message.refusal`` becomes ``finish_reason="refusal"`` with the refusal's text,
  and ``length``, ``content_filter``, ``tool_calls`` and ``stop`` pass through, so the
  output guard sees a refusal or a truncation as such;
- ``usage`` becomes :class:`Usage`, its cost computed exactly from
  :class:`TokenPrices`;
- ``stream`` asks with ``"stream": true`` (and ``stream_options.include_usage``,
  unless ``extra`` sets ``stream_options``), yields the text deltas as they come and
  then the reply the chunks make up (``_sse``), read as a non-streamed body is; a
  server that answers with a plain chat completion is read as one.

The time limit of a call is the smaller of the adapter's ``timeout`` and the time
the run has left (``ModelRequest.timeout``); at the limit the HTTP request is
cancelled and :class:`TimeoutError` raised. The HTTP client never retries (its
transport has ``retries=0``): a 429 or 5xx raises :class:`ModelUnavailableError`
at once, and whether to try again is the caller's policy. A refused request (any
other 4xx) raises :class:`ModelRequestError`, a body that is not a chat completion
:class:`ModelResponseError`; no httpx exception escapes.
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import AsyncIterator, Generator
from contextlib import AsyncExitStack, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, final

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
from ._sse import _Completion, _StreamBroken, _StreamMalformed, data_of

if TYPE_CHECKING:
    import ssl

    import httpx

# httpx (and the ssl, email and urllib modules it loads) is imported where a client is
# made or a request sent, not at the top: TokenPrices and building a model need none of it.

__all__ = ["API_KEY_ENV", "OpenAICompatibleModel", "TokenPrices"]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable read for the API key when none is passed."""

_FinishReason = Literal["stop", "length", "refusal", "content_filter", "tool_calls"]
_FINISH_REASONS: dict[str, _FinishReason] = {
    "stop": "stop",
    "length": "length",
    "content_filter": "content_filter",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",  # the protocol's older name for a tool call
}
_SCHEMA_NAME = re.compile(r"[^A-Za-z0-9_-]")
# Words in a refusal that show the server does not take response_format's json_schema.
_STRUCTURED_WORDS = re.compile(r"response_format|json_schema", re.IGNORECASE)
_EXCERPT_CHARS = 300


@final
class OpenAICompatibleModel:
    """A model behind an OpenAI-compatible chat-completions endpoint.

    ``base_url`` is the API's root, such as ``https://api.openai.com/v1`` or
    ``http://127.0.0.1:8080/v1``; ``model`` the name the server serves. The API key
    is ``api_key`` or else the environment variable ``OPENAI_API_KEY``; with neither,
    no ``Authorization`` header is sent (local servers need none).
    ``constrained=True`` declares that the server enforces a strict JSON schema
    (``response_format``), so that an output guard in ``constrained`` mode accepts
    this model. ``timeout`` bounds every call, in seconds. ``prices`` turns usage
    into cost. ``settings`` are this model's defaults (an agent's, when each agent
    has its model); a request's settings replace them one by one.

    ``client`` is an ``httpx.AsyncClient`` to send with (tests pass one with a mock
    transport); its owner closes it, and should build it with
    ``httpx.AsyncHTTPTransport(retries=0)``. Without one, ``async with model:`` keeps
    one connection pool for the block; outside such a block each call opens and
    closes its own client, which works in any event loop.
    """

    __slots__ = (
        "_api_key",
        "_base_url",
        "_client",
        "_constrained",
        "_model",
        "_owned",
        "_prices",
        "_settings",
        "_structured",
        "_timeout",
        "_url",
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        constrained: bool = False,
        timeout: float = 60.0,
        prices: TokenPrices | None = None,
        settings: ModelSettings | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        url = base_url.rstrip("/")
        if not re.match(r"https?://[^/\s]+", url):
            raise SetupError(
                f"base_url must be an http:// or https:// address such as "
                f"'http://127.0.0.1:8080/v1', got {base_url!r}"
            )
        if not model.strip():
            raise SetupError(f"model must name the model the server serves, got {model!r}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise SetupError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self._base_url = url
        self._url = f"{url}/chat/completions"
        self._model = model
        self._api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self._constrained = constrained
        self._timeout = float(timeout)
        self._prices = TokenPrices() if prices is None else prices
        self._settings = NO_SETTINGS if settings is None else settings
        self._structured: Literal["json_schema", "json_object"] = "json_schema"
        self._client = client
        self._owned: httpx.AsyncClient | None = None

    def __repr__(self) -> str:
        return (
            f"OpenAICompatibleModel({self._base_url!r}, {self._model!r}, "
            f"constrained={self._constrained})"
        )

    @property
    def base_url(self) -> str:
        """The API's root, without a trailing slash."""
        return self._base_url

    @property
    def model(self) -> str:
        """The model name sent with every request."""
        return self._model

    @property
    def constrained(self) -> bool:
        """Whether the server enforces a strict output schema while decoding."""
        return self._constrained

    @property
    def timeout(self) -> float:
        """The most seconds one call may take, whatever the run has left."""
        return self._timeout

    @property
    def settings(self) -> ModelSettings:
        """This model's default settings, under each request's."""
        return self._settings

    @property
    def structured_output(self) -> Literal["json_schema", "json_object"]:
        """The ``response_format`` type an output schema is sent as.

        ``json_schema`` until the server refuses it, then ``json_object`` (with the
        schema) for the rest of this object's life.
        """
        return self._structured

    @property
    def prices(self) -> TokenPrices:
        """The prices that turn usage into cost."""
        return self._prices

    async def __aenter__(self) -> Self:
        if self._client is None and self._owned is None:
            self._owned = _new_client()
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool this model opened (never an injected client)."""
        owned, self._owned = self._owned, None
        if owned is not None:
            await owned.aclose()

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``.

        :class:`SetupError` if the request carries an output schema and this model is
        not ``constrained``: the schema would not be enforced, and saying so beats
        validating after the fact without anyone knowing.
        """
        settings = self._settings.merged(request.settings)
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [_message(message) for message in request.messages],
        }
        if request.tools:
            body["tools"] = [_tool(schema) for schema in request.tools]
            body.update(_tool_settings(settings, request.tools))
        if request.output_schema is not None:
            if not self._constrained:
                raise SetupError(
                    f"{self!r} was asked to enforce an output schema but is not "
                    "constrained; pass constrained=True if the server supports strict "
                    "response_format, or use guard mode 'auto_repair' or 'reject'"
                )
            body["response_format"] = _response_format(request.output_schema, self._structured)
        body.update(_sampling(settings))
        return _with_extra(body, settings.extra)

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and read the reply, within the adapter's and the run's time.

        Raises :class:`TimeoutError` (the request is cancelled), or
        :class:`ModelUnavailableError`, :class:`ModelRequestError` or
        :class:`ModelResponseError`.
        """
        limit = self._timeout if request.timeout is None else min(self._timeout, request.timeout)
        content = self._content(request)
        if limit <= 0:
            raise TimeoutError(f"no time was left to ask the model at {self._url}")
        try:
            with anyio.fail_after(limit):
                response = await self._send(content, limit)
                if self._refuses_json_schema(request, response):
                    self._fall_back(response)
                    response = await self._send(self._content(request), limit)
        except TimeoutError:
            raise TimeoutError(
                f"the model at {self._url} did not answer within {limit:.2f}s; "
                "the request was cancelled"
            ) from None
        return self._read(response, structured=request.output_schema is not None)

    def _content(self, request: ModelRequest, *, stream: bool = False) -> bytes:
        body = self.body(request)
        if stream:
            body["stream"] = True
            body.setdefault("stream_options", {"include_usage": True})
        return _json.dumps(body).encode("utf-8", "backslashreplace")

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """:meth:`complete`, streamed: the text as the server writes it, then the reply.

        The reply is the one the chunks make up, checked as a non-streamed body is;
        the same time limit bounds the whole stream, and the same errors are raised.
        An error event in the stream, or a stream that stops before the answer is
        over, raises :class:`ModelUnavailableError`.
        """
        limit = self._timeout if request.timeout is None else min(self._timeout, request.timeout)
        if limit <= 0:
            raise TimeoutError(f"no time was left to ask the model at {self._url}")
        deadline = anyio.current_time() + limit
        structured = request.output_schema is not None
        async with AsyncExitStack() as stack:
            with self._timed(limit), anyio.fail_after(limit):
                response = await self._open_stream(stack, request, limit)
                if self._refuses_json_schema(request, response):
                    self._fall_back(response)
                    response = await self._open_stream(stack, request, limit)
            if response.status_code >= 300 or not _is_event_stream(response):
                reply = self._read(response, structured=structured)  # an error, or no stream
                yield ModelChunk(text=reply.text, reply=reply)
                return
            completion = _Completion()
            lines = response.aiter_lines()
            while not completion.done:
                with self._timed(limit), anyio.fail_after(deadline - anyio.current_time()):
                    line = await self._next_line(lines)
                if line is None:
                    break
                text = self._added(completion, line)
                if text:
                    yield ModelChunk(text=text)
            yield ModelChunk(reply=self._completed(completion))

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

    async def _open_stream(
        self, stack: AsyncExitStack, request: ModelRequest, limit: float
    ) -> httpx.Response:
        """The response to ``request`` asked as a stream, its body read unless it streams."""
        import httpx

        headers = {"content-type": "application/json", "accept": "text/event-stream"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        content = self._content(request, stream=True)
        with self._http_errors():
            client = self._client or self._owned
            if client is None:
                client = await stack.enter_async_context(_new_client())
            sent = client.stream(
                "POST", self._url, content=content, headers=headers, timeout=httpx.Timeout(limit)
            )
            response = await stack.enter_async_context(sent)
            if response.status_code >= 300 or not _is_event_stream(response):
                await response.aread()
        return response

    async def _next_line(self, lines: AsyncIterator[str]) -> str | None:
        """The stream's next line; ``None`` at its end."""
        with self._http_errors():
            return await anext(lines, None)

    @contextmanager
    def _http_errors(self) -> Generator[None]:
        """httpx's errors as the adapter's: a timeout, or the model unavailable."""
        import httpx

        try:
            yield
        except httpx.TimeoutException as error:
            raise TimeoutError(str(error) or "timed out") from error
        except httpx.HTTPError as error:  # refused, reset, or not HTTP at all
            detail = str(error) or type(error).__name__
            raise ModelUnavailableError(detail, url=self._url) from error

    def _added(self, completion: _Completion, line: str) -> str:
        """The text one line of the stream adds to ``completion``."""
        data = data_of(line)
        if data is None:
            return ""
        try:
            return completion.add(data)
        except _StreamMalformed as problem:
            excerpt = _clip(data[:_EXCERPT_CHARS])
            raise ModelResponseError(str(problem), url=self._url, excerpt=excerpt) from None
        except _StreamBroken as problem:
            raise ModelUnavailableError(
                f"the stream broke off with an error: {problem}", url=self._url, status=200
            ) from None

    def _completed(self, completion: _Completion) -> ModelReply:
        """The reply a finished stream makes up."""
        if not completion.finished:
            raise ModelUnavailableError(
                "the stream ended before the answer did (no finish reason, no [DONE])",
                url=self._url,
                status=200,
            )
        try:
            return self._reply(completion.document())
        except _Malformed as problem:
            raise ModelResponseError(f"the streamed answer: {problem}", url=self._url) from None

    def _fall_back(self, response: httpx.Response) -> None:
        """Send output schemas as json_object from now on, and log why."""
        import logging

        import structlog  # here: only this rare path logs

        self._structured = "json_object"
        structlog.wrap_logger(logging.getLogger("statemachine.models")).warning(
            "the server refused response_format json_schema; "
            "asking again, and from now on, with json_object",
            url=self._url,
            status=response.status_code,
            detail=_server_message(response),
        )

    def _refuses_json_schema(self, request: ModelRequest, response: httpx.Response) -> bool:
        """Whether ``response`` refuses the json_schema ``response_format`` just sent."""
        status = response.status_code
        return (
            request.output_schema is not None
            and self._structured == "json_schema"
            and status >= 400
            and status not in (401, 403, 404, 429)
            and self._names_structured_output(response)
        )

    @staticmethod
    def _names_structured_output(response: httpx.Response) -> bool:
        return _STRUCTURED_WORDS.search(_server_message(response)) is not None

    async def _send(self, content: bytes, limit: float) -> httpx.Response:
        import httpx

        headers = {"content-type": "application/json", "accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        timeout = httpx.Timeout(limit)
        try:
            client = self._client or self._owned
            if client is not None:
                return await client.post(
                    self._url, content=content, headers=headers, timeout=timeout
                )
            async with _new_client() as fresh:
                return await fresh.post(
                    self._url, content=content, headers=headers, timeout=timeout
                )
        except httpx.TimeoutException as error:
            raise TimeoutError(str(error) or "timed out") from error
        except httpx.HTTPError as error:  # refused, reset, or not HTTP at all
            detail = str(error) or type(error).__name__
            raise ModelUnavailableError(detail, url=self._url) from error

    def _read(self, response: httpx.Response, *, structured: bool = False) -> ModelReply:
        """The reply in ``response``; ``structured``: the request sent an output schema.

        A 5xx that names ``response_format`` or ``json_schema`` in answer to an output
        schema is the server refusing what was asked, not a passing failure: a
        :class:`ModelRequestError`, so that no policy asks again in vain.
        """
        status = response.status_code
        if structured and status >= 500 and self._names_structured_output(response):
            raise ModelRequestError(_server_message(response), url=self._url, status=status)
        if status == 429 or status >= 500:
            raise ModelUnavailableError(
                _server_message(response),
                url=self._url,
                status=status,
                retry_after=_retry_after(response),
            )
        if 400 <= status < 500:
            raise ModelRequestError(_server_message(response), url=self._url, status=status)
        if not 200 <= status < 300:
            raise self._malformed(response, f"HTTP {status} is not an answer")
        try:
            document = _json.loads(response.content, bounded=True)
        except (ValueError, RecursionError):
            raise self._malformed(response, "the body is not JSON") from None
        try:
            return self._reply(document)
        except _Malformed as problem:
            raise self._malformed(response, str(problem)) from None

    def _malformed(self, response: httpx.Response, detail: str) -> ModelResponseError:
        return ModelResponseError(detail, url=self._url, excerpt=_excerpt(response))

    def _reply(self, document: Any) -> ModelReply:
        choices = _field(document, "choices", list, "the body")
        if not choices:
            raise _Malformed("'choices' is empty")
        message = _field(choices[0], "message", dict, "choices[0]")
        content = _optional(message, "content", str, "the message") or ""
        refusal = _optional(message, "refusal", str, "the message")
        calls = tuple(
            _tool_request(call, index)
            for index, call in enumerate(
                _optional(message, "tool_calls", list, "the message") or []
            )
        )
        stated = _optional(choices[0], "finish_reason", str, "choices[0]")
        finish: _FinishReason
        if refusal:
            content, finish = refusal, "refusal"
        elif stated in _FINISH_REASONS:
            finish = _FINISH_REASONS[stated]
        else:  # missing, or a server's own word: say what the reply holds
            finish = "tool_calls" if calls else "stop"
        usage = _optional(document, "usage", dict, "the body") or {}
        input_tokens = _tokens(usage, "prompt_tokens")
        output_tokens = _tokens(usage, "completion_tokens")
        try:
            cost = self._prices.cost(input_tokens, output_tokens)
        except ValueError as problem:
            raise _Malformed(f"usage cannot be priced: {problem}") from None
        return ModelReply(
            text=content,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost=cost,
            ),
        )


def _is_event_stream(response: httpx.Response) -> bool:
    kind: str = response.headers.get("content-type", "")
    return kind.startswith("text/event-stream")


def _new_client() -> httpx.AsyncClient:
    import httpx

    # Retries belong to the run's policy, never to the transport.
    transport = httpx.AsyncHTTPTransport(retries=0, verify=_tls())
    return httpx.AsyncClient(transport=transport)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle takes a tenth of a second."""
    import httpx

    return httpx.create_ssl_context()


# --- the request -----------------------------------------------------------------------


def _message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    out: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        out["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in message.tool_calls
        ]
    if message.name:
        out["name"] = message.name
    return out


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's schema (name, description, parameters) as a chat-completions tool."""
    if schema.get("type") == "function":
        return schema
    return {"type": "function", "function": schema}


def _tool_name(schema: dict[str, Any]) -> str:
    function = schema.get("function") if schema.get("type") == "function" else schema
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else ""


def _tool_settings(settings: ModelSettings, tools: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """``tool_choice`` and ``parallel_tool_calls``, for a request that offers ``tools``."""
    out: dict[str, Any] = {}
    choice = settings.tool_choice
    if choice in TOOL_CHOICE_MODES:
        out["tool_choice"] = choice
    elif choice is not None:
        offered = [_tool_name(schema) for schema in tools]
        if choice not in offered:
            raise SetupError(
                f"tool_choice names the tool {choice!r}, which this request does not offer "
                f"(it offers {', '.join(map(repr, offered))}); name one of those, or use "
                f"one of {', '.join(map(repr, TOOL_CHOICE_MODES))}"
            )
        out["tool_choice"] = {"type": "function", "function": {"name": choice}}
    if settings.parallel_tool_calls is not None:
        out["parallel_tool_calls"] = settings.parallel_tool_calls
    return out


def _sampling(settings: ModelSettings) -> dict[str, Any]:
    """The settings that apply to every request, under the protocol's names."""
    given = {
        "temperature": settings.temperature,
        "max_tokens": settings.max_tokens,
        "seed": settings.seed,
        "stop": None if settings.stop is None else list(settings.stop),
    }
    return {key: value for key, value in given.items() if value is not None}


def _with_extra(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``extra`` added; :class:`SetupError` for a key the body has already."""
    taken = sorted(set(body) & set(extra))
    if taken:
        raise SetupError(
            f"the settings' extra would replace {', '.join(map(repr, taken))}, which this "
            "adapter writes itself from the request and its settings; set the ModelSettings "
            "field or the request's part instead"
        )
    return {**body, **extra}


def _response_format(
    schema: dict[str, Any], kind: Literal["json_schema", "json_object"]
) -> dict[str, Any]:
    if kind == "json_object":  # llama-cpp-python's and llama.cpp's servers read "schema"
        return {"type": "json_object", "schema": schema}
    return {
        "type": "json_schema",
        "json_schema": {"name": _schema_name(schema), "schema": schema, "strict": True},
    }


def _schema_name(schema: dict[str, Any]) -> str:
    title = schema.get("title")
    name = _SCHEMA_NAME.sub("_", title)[:64] if isinstance(title, str) else ""
    return name or "output"


# --- the reply -------------------------------------------------------------------------


class _Malformed(Exception):
    """A reply body that does not have the shape of a chat completion."""


def _field(container: Any, key: str, kind: type[Any], where: str) -> Any:
    value = _optional(container, key, kind, where)
    if value is None:
        raise _Malformed(f"{where} has no {key!r}")
    return value


def _optional(container: Any, key: str, kind: type[Any], where: str) -> Any:
    if not isinstance(container, dict):
        raise _Malformed(f"{where} is not a JSON object")
    value = container.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
        raise _Malformed(f"{where}'s {key!r} is {_json.dumps(value)[:60]}, not {_kind(kind)}")
    return value


def _kind(kind: type[Any]) -> str:
    return {str: "a string", list: "a list", dict: "an object", int: "an integer"}[kind]


def _tool_request(call: Any, index: int) -> ToolRequest:
    where = f"tool_calls[{index}]"
    kind = _optional(call, "type", str, where)
    if kind not in (None, "function"):
        raise _Malformed(f"{where} is of type {kind!r}; only function tools were offered")
    function = _field(call, "function", dict, where)
    name = _field(function, "name", str, f"{where}.function")
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    elif isinstance(arguments, dict):
        # Some servers send the object itself; it was read exactly, so write it back.
        arguments = _json.dumps(arguments)
    elif not isinstance(arguments, str):
        raise _Malformed(f"{where}.function's 'arguments' is not a string")
    return ToolRequest(name=name, arguments=arguments, id=_optional(call, "id", str, where) or "")


def _tokens(usage: dict[str, Any], key: str) -> int:
    value = _optional(usage, key, int, "usage")
    if value is None:
        return 0
    if value < 0:
        raise _Malformed(f"usage's {key!r} is negative")
    return int(value)


def _server_message(response: httpx.Response) -> str:
    """The server's own words about an error, from the shapes servers use."""
    try:
        document = _json.loads(response.content, bounded=True)
    except (ValueError, RecursionError):
        document = None
    if isinstance(document, dict):
        error = document.get("error")
        message = error.get("message") if isinstance(error, dict) else None
        if isinstance(message, str):
            return _clip(message)
        for said in (error, document.get("message"), document.get("detail")):
            if isinstance(said, str) and said:
                return _clip(said)
    return _excerpt(response) or response.reason_phrase or "no message"


def _retry_after(response: httpx.Response) -> float | None:
    try:
        seconds = float(response.headers.get("retry-after", ""))
    except ValueError:  # absent, or an HTTP date: not worth guessing
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _excerpt(response: httpx.Response) -> str:
    return _clip(response.content[:_EXCERPT_CHARS].decode("utf-8", "replace").strip())


def _clip(text: str) -> str:
    return text if len(text) <= _EXCERPT_CHARS else text[:_EXCERPT_CHARS] + "..."
