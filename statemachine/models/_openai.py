"""A :class:`Model` that speaks the OpenAI chat-completions protocol, through the ``openai`` SDK.

Any server that answers ``POST <base_url>/chat/completions`` works: OpenAI itself,
vLLM, llama.cpp's server, llama-cpp-python's, Ollama. The official SDK (the ``openai``
extra) sends the request, streams the server-sent events and accumulates their chunks,
and raises typed errors; this adapter maps one :class:`ModelRequest` to one call and
the answer back to one :class:`ModelReply`, and decides nothing else:

- messages, tools, settings and the output schema are written as the protocol's body
  (``_chat``): an assistant message that only calls tools has ``"content": ""``; a
  ``constrained`` model sends the request's output schema as a strict
  ``response_format``; :class:`ModelSettings` (the adapter's own, with the request's
  over them) become ``temperature``, ``max_tokens``, ``seed``, ``stop``,
  ``tool_choice`` and ``parallel_tool_calls`` (these two only when tools are offered),
  and ``extra`` is added as it is;
- a server that refuses what it could be sent otherwise is asked again at once, once,
  and the model remembers it (and logs it): ``json_schema`` refused (a 4xx or 5xx
  whose message names ``response_format`` or ``json_schema``) becomes
  ``{"type": "json_object", "schema": ...}``, which llama-cpp-python's and llama.cpp's
  servers enforce with a grammar (``structured_output``); ``tool_choice="required"``
  refused (a 5xx with no message, as llama-cpp-python's server answers it, or an error
  naming ``tool_choice``) becomes the one tool offered, named, or ``"auto"`` when
  several are (``required_tool_choice``); ``max_tokens`` refused by a 4xx that names
  ``max_completion_tokens`` (OpenAI's newer models) is sent under that name;
- the body of an answer is read by the library's JSON reader, not the SDK's models: a
  tool call's arguments come back as the exact text the server sent (the agent's tool
  registry validates them; malformed JSON becomes feedback to the model there);
  ``message.refusal`` becomes ``finish_reason="refusal"``; ``length``,
  ``content_filter``, ``tool_calls`` and ``stop`` pass through, and a tool call whose
  arguments were cut at ``max_tokens`` is ``length``, so that a truncation is reported
  as one; ``usage`` becomes :class:`Usage`, its cost computed exactly from
  :class:`TokenPrices`;
- ``stream`` asks with ``"stream": true`` (and ``stream_options.include_usage``,
  unless ``extra`` sets ``stream_options``), yields the text deltas as they come and
  then the reply the chunks make up (the SDK's ``ChatCompletionStreamState``), read as
  a non-streamed body is; a server that answers with a plain chat completion is read
  as one.

The time limit of a call is the smaller of the adapter's ``timeout`` and the time the
run has left (``ModelRequest.timeout``); at the limit the request is cancelled and
:class:`TimeoutError` raised. The SDK never retries (``max_retries=0``): the phases
own retries. A failure that may pass (a connection refused or reset, 408, 409, 429 or
a 5xx) raises :class:`ModelUnavailableError` at once, with the wait the server asked
for (``retry-after-ms`` or ``retry-after``); a refused request (any other 4xx, a 501,
or a 5xx that names ``response_format`` in answer to an output schema) raises
:class:`ModelRequestError`, saying what to fix; a body that is not a chat completion
:class:`ModelResponseError`, except one that holds an ``error`` object instead (some
gateways answer so, with a 200), which is that error: refused when its ``code`` is a
4xx that will not pass, else unavailable. No SDK or httpx exception escapes.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from collections.abc import AsyncGenerator, AsyncIterator, Generator
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
    ModelChunk,
    ModelReply,
    ModelRequest,
    ModelSettings,
)
from ._chat import (
    Malformed,
    message_json,
    reply_of,
    response_format,
    sampling,
    server_said,
    tool_json,
    tool_settings,
    with_extra,
)
from ._prices import TokenPrices
from ._wire import EXCERPT_CHARS, clip, retry_after, wire

if TYPE_CHECKING:
    import ssl

    import httpx
    import openai
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk

# httpx and the SDK (and the ssl, email and urllib modules they load) are imported where
# a client is made or a request sent: TokenPrices and building a model need none of them.

__all__ = ["API_KEY_ENV", "OpenAICompatibleModel", "TokenPrices"]

API_KEY_ENV = "OPENAI_API_KEY"
"""The environment variable read for the API key when none is passed."""

# Words in a refusal that show the server does not take response_format's json_schema.
_STRUCTURED_WORDS = re.compile(r"response_format|json_schema", re.IGNORECASE)
_TOOL_CHOICE_WORDS = re.compile(r"tool[_ ]choice", re.IGNORECASE)
# Statuses of a request that may succeed if sent again later: a request timeout, a
# conflict, rate limiting; and every 5xx but those that say the server cannot do it.
_TRANSIENT: Final = frozenset({408, 409, 429})
_UNSUPPORTED: Final = frozenset({501, 505})
# The body's keys the SDK's ``create`` takes by name; any other goes as ``extra_body``.
_SDK_PARAMETERS: Final = frozenset(
    {
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "temperature",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "stream",
        "stream_options",
    }
)


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

    ``client`` is an ``httpx.AsyncClient`` for the SDK to send with (tests pass one
    with a mock transport); its owner closes it, and should build it with
    ``httpx.AsyncHTTPTransport(retries=0)``. Without one, ``async with model:`` keeps
    one SDK client and connection pool for the block; outside such a block each call
    opens and closes its own, which works in any event loop.
    """

    __slots__ = (
        "_api_key",
        "_base_url",
        "_client",
        "_constrained",
        "_length_key",
        "_model",
        "_owned",
        "_prices",
        "_required",
        "_settings",
        "_structured",
        "_timeout",
        "_url",
        "_wrapped",
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
        self._required = True
        self._length_key: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
        self._client = client
        self._wrapped: openai.AsyncOpenAI | None = None  # the SDK around ``client``
        self._owned: openai.AsyncOpenAI | None = None  # the SDK of an ``async with`` block

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
    def required_tool_choice(self) -> bool:
        """Whether ``tool_choice="required"`` is sent as it is.

        ``True`` until the server refuses it; then, for the rest of this object's life,
        a request offering one tool names it, and one offering several sends ``"auto"``.
        """
        return self._required

    @property
    def prices(self) -> TokenPrices:
        """The prices that turn usage into cost."""
        return self._prices

    async def __aenter__(self) -> Self:
        if self._client is None and self._owned is None:
            self._owned = self._new_sdk(_new_client())
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
            await owned.close()

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``.

        :class:`SetupError` if the request carries an output schema and this model is
        not ``constrained``: the schema would not be enforced, and saying so beats
        validating after the fact without anyone knowing.
        """
        settings = self._settings.merged(request.settings)
        body: dict[str, Any] = {
            "model": self._model,
            "messages": [message_json(message) for message in request.messages],
        }
        if request.tools:
            body["tools"] = [tool_json(schema) for schema in request.tools]
            body.update(tool_settings(settings, request.tools, required=self._required))
        if request.output_schema is not None:
            if not self._constrained:
                raise SetupError(
                    f"{self!r} was asked to enforce an output schema but is not "
                    "constrained; pass constrained=True if the server supports strict "
                    "response_format, or use guard mode 'auto_repair' or 'reject'"
                )
            body["response_format"] = response_format(request.output_schema, self._structured)
        body.update(sampling(settings))
        if self._length_key != "max_tokens" and "max_tokens" in body:
            body[self._length_key] = body.pop("max_tokens")
        return with_extra(body, settings.extra)

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Send ``request`` and read the reply, within the adapter's and the run's time.

        Raises :class:`TimeoutError` (the request is cancelled), or
        :class:`ModelUnavailableError`, :class:`ModelRequestError` or
        :class:`ModelResponseError`.
        """
        limit = self._limit(request)
        async with self._sdk() as sdk:
            with self._timed(limit), anyio.fail_after(limit):
                raw, body = await self._sent(sdk, request, limit, stream=False)
        return self._read(raw.http_response, body)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelChunk]:
        """:meth:`complete`, streamed: the text as the server writes it, then the reply.

        The reply is the one the chunks make up, checked as a non-streamed body is;
        the same time limit bounds the whole stream, and the same errors are raised.
        An error event in the stream, or a stream that stops before the answer is
        over, raises :class:`ModelUnavailableError`.
        """
        from openai.lib.streaming.chat import ChatCompletionStreamState

        limit = self._limit(request)
        deadline = anyio.current_time() + limit
        async with self._sdk() as sdk, AsyncExitStack() as stack:
            with self._timed(limit), anyio.fail_after(limit):
                chunks, body = await self._sent(sdk, request, limit, stream=True)
                stack.push_async_callback(_shut, chunks)
                if not _is_event_stream(chunks.response):  # a server that does not stream
                    with self._transport_errors():
                        await chunks.response.aread()
            if not _is_event_stream(chunks.response):
                reply = self._read(chunks.response, body)
                yield ModelChunk(text=reply.text, reply=reply)
                return
            state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
            usage: Any = None
            heard = False
            while True:
                with self._timed(limit), anyio.fail_after(deadline - anyio.current_time()):
                    chunk = await self._next(chunks)
                if chunk is None:
                    break
                heard, usage = True, chunk.usage or usage
                text = self._added(state, chunk)
                if text:
                    yield ModelChunk(text=text)
            yield ModelChunk(reply=self._completed(state if heard else None, usage, body))

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

    # --- the SDK -----------------------------------------------------------------------

    @asynccontextmanager
    async def _sdk(self) -> AsyncGenerator[openai.AsyncOpenAI]:
        """The SDK client to send with: the block's, the one around the injected client,
        or one of its own, closed when the call ends (even when cancelled)."""
        if self._owned is not None:
            yield self._owned
            return
        if self._client is not None:
            if self._wrapped is None:
                self._wrapped = self._new_sdk(self._client)
            yield self._wrapped
            return
        fresh = self._new_sdk(_new_client())
        try:
            yield fresh
        finally:
            with anyio.CancelScope(shield=True):
                await fresh.close()

    def _new_sdk(self, http: httpx.AsyncClient) -> openai.AsyncOpenAI:
        try:
            import openai
        except ImportError:
            raise SetupError(
                "OpenAICompatibleModel needs the openai package: "
                "pip install 'statemachine-agents[openai]'"
            ) from None
        # Retries belong to the run's phases, never to the SDK. The SDK insists on a key;
        # without one, no Authorization header is sent (_create omits it).
        return openai.AsyncOpenAI(
            api_key=self._api_key or "no-key",
            base_url=self._base_url,
            max_retries=0,
            timeout=self._timeout,
            http_client=http,
        )

    async def _sent(
        self, sdk: openai.AsyncOpenAI, request: ModelRequest, limit: float, *, stream: bool
    ) -> tuple[Any, dict[str, Any]]:
        """The SDK's answer to ``request`` and the body it was sent.

        A refusal of something this adapter can send otherwise (``json_schema``,
        ``tool_choice="required"``) is asked again at once with the other form; each
        form is given up once, so this asks at most three times.
        """
        import openai

        while True:
            body = self.body(request)
            if stream:
                body["stream"] = True
                body.setdefault("stream_options", {"include_usage": True})
            try:
                with self._transport_errors():
                    return await self._create(sdk, body, limit), body
            except openai.APIStatusError as error:
                if not self._fell_back(request, body, error.response):
                    raise self._refused(error.response, body) from None

    async def _create(self, sdk: openai.AsyncOpenAI, body: dict[str, Any], limit: float) -> Any:
        """``chat.completions.create`` with ``body``: the raw response, or the stream."""
        from openai import omit

        named = {key: wire(value) for key, value in body.items() if key in _SDK_PARAMETERS}
        extra = {
            key: wire(value)
            for key, value in body.items()
            if key not in _SDK_PARAMETERS and key not in ("model", "messages")
        }
        options: dict[str, Any] = {
            "model": body["model"],
            "messages": body["messages"],
            "extra_headers": None if self._api_key else {"Authorization": omit},
            "extra_body": extra or None,
            "timeout": limit,
            **named,
        }
        completions = sdk.chat.completions
        if body.get("stream"):
            return await completions.create(**options)
        return await completions.with_raw_response.create(**options)

    @contextmanager
    def _transport_errors(self) -> Generator[None]:
        """The SDK's and httpx's transport errors as the adapter's: a timeout, or the
        model unavailable (no answer at all: refused, reset, or not HTTP)."""
        import httpx
        import openai

        try:
            yield
        except (openai.APITimeoutError, httpx.TimeoutException) as error:
            raise TimeoutError(str(error) or "timed out") from error
        except (openai.APIConnectionError, httpx.HTTPError) as error:
            cause = error.__cause__ if isinstance(error, openai.APIConnectionError) else error
            detail = str(cause or error) or type(cause or error).__name__
            raise ModelUnavailableError(detail, url=self._url) from error

    def _fell_back(self, request: ModelRequest, body: dict[str, Any], refusal: Any) -> bool:
        """Whether ``refusal`` (an error response) refuses a form this adapter can give
        up, which it then gives up for good (and logs); ``False`` for any other."""
        status: int = refusal.status_code
        said = server_said(refusal.content)
        words = said or ""
        if status in (401, 403, 404, *_TRANSIENT):
            return False
        if (
            request.output_schema is not None
            and self._structured == "json_schema"
            and _STRUCTURED_WORDS.search(words)
        ):
            self._structured = "json_object"
            self._warn("response_format json_schema", "json_object", status, words)
            return True
        if (
            body.get("tool_choice") == "required"
            and self._required
            and (_TOOL_CHOICE_WORDS.search(words) or (status >= 500 and not said))
        ):
            self._required = False
            self._warn("tool_choice 'required'", "the one tool named, else 'auto'", status, words)
            return True
        if "max_tokens" in body and "max_completion_tokens" in words and status < 500:
            # OpenAI's newer models take the cap only under its newer name.
            self._length_key = "max_completion_tokens"
            self._warn("max_tokens", "max_completion_tokens", status, words)
            return True
        return False

    def _warn(self, refused: str, instead: str, status: int, detail: str) -> None:
        import logging

        import structlog  # here: only this rare path logs

        structlog.wrap_logger(logging.getLogger("statemachine.models")).warning(
            f"the server refused {refused}; asking again, and from now on, with {instead}",
            url=self._url,
            status=status,
            detail=detail or "no message",
        )

    def _refused(self, response: httpx.Response, body: dict[str, Any]) -> Exception:
        """The error for an answer with an error status: unavailable for now, or refused."""
        status = response.status_code
        detail = _server_message(response)
        structured = "response_format" in body
        if structured and status >= 500 and _STRUCTURED_WORDS.search(detail):
            # The server refuses what was asked, not a passing failure: not retried.
            return ModelRequestError(detail, url=self._url, status=status)
        if status in _TRANSIENT or (status >= 500 and status not in _UNSUPPORTED):
            wait = retry_after(response.headers)
            return ModelUnavailableError(detail, url=self._url, status=status, retry_after=wait)
        return ModelRequestError(detail, url=self._url, status=status)

    # --- the answer --------------------------------------------------------------------

    def _read(self, response: httpx.Response, body: dict[str, Any]) -> ModelReply:
        """The reply in a 2xx ``response`` to ``body``."""
        status = response.status_code
        if not 200 <= status < 300:
            raise self._malformed(response.content, f"HTTP {status} is not an answer")
        try:
            document = _json.loads(response.content, bounded=True)
        except (ValueError, RecursionError):
            raise self._malformed(response.content, "the body is not JSON") from None
        if isinstance(document, dict) and "choices" not in document and document.get("error"):
            raise self._error_in_body(document["error"], response.content)
        try:
            return reply_of(document, self._prices, max_tokens=_cap(body))
        except Malformed as problem:
            raise self._malformed(response.content, str(problem)) from None

    def _error_in_body(self, error: Any, content: bytes) -> Exception:
        """The error a 2xx body holds instead of a completion (some gateways answer so):
        refused when its ``code`` is a status that will not pass, else unavailable."""
        code = error.get("code") if isinstance(error, dict) else None
        said = server_said(content) or "no message"
        detail = f"the server answered {said!r} as an error in a 2xx body"
        if isinstance(code, int) and 400 <= code < 500 and code not in _TRANSIENT:
            return ModelRequestError(detail, url=self._url, status=code)
        status = code if isinstance(code, int) and 400 <= code < 600 else 200
        return ModelUnavailableError(detail, url=self._url, status=status)

    def _malformed(self, content: bytes, detail: str) -> ModelResponseError:
        return ModelResponseError(detail, url=self._url, excerpt=_excerpt(content))

    async def _next(self, chunks: openai.AsyncStream[ChatCompletionChunk]) -> Any:
        """The stream's next chunk; ``None`` at its end."""
        import openai

        try:
            with self._transport_errors():
                return await anext(chunks, None)
        except json.JSONDecodeError:
            raise ModelResponseError("an event's data is not JSON", url=self._url) from None
        except openai.APIError as error:  # an error event, after the 200
            raise ModelUnavailableError(
                f"the stream broke off with an error: {error.message}", url=self._url, status=200
            ) from None

    def _added(self, state: ChatCompletionStreamState[object], chunk: ChatCompletionChunk) -> str:
        """The text ``chunk`` adds, once added to ``state``."""
        try:
            state.handle_chunk(_filled(chunk))
            choices = chunk.choices
            delta = choices[0].delta.content if choices else None
        except (AttributeError, TypeError, KeyError, IndexError, ValueError) as problem:
            detail = f"a chunk is not a chat completion chunk ({type(problem).__name__})"
            raise ModelResponseError(detail, url=self._url) from None
        return delta if isinstance(delta, str) else ""

    def _completed(
        self, state: ChatCompletionStreamState[object] | None, usage: Any, body: dict[str, Any]
    ) -> ModelReply:
        """The reply a finished stream makes up (``state``: ``None`` when it sent nothing)."""
        document: Any = None if state is None else state.current_completion_snapshot.to_dict()
        choices = document.get("choices") if isinstance(document, dict) else None
        if not (choices and isinstance(choices[0], dict) and choices[0].get("finish_reason")):
            raise ModelUnavailableError(
                "the stream ended before the answer did (no finish reason)",
                url=self._url,
                status=200,
            )
        document["usage"] = None if usage is None else usage.to_dict()
        try:
            return reply_of(document, self._prices, max_tokens=_cap(body))
        except Malformed as problem:
            raise ModelResponseError(f"the streamed answer: {problem}", url=self._url) from None


def _filled(chunk: ChatCompletionChunk) -> ChatCompletionChunk:
    """``chunk`` with the parts servers leave out that the SDK's accumulator needs: no
    ``choices`` (a usage-only chunk) is none, a choice's missing ``index`` (and a tool
    call's) is 0, its missing ``delta`` an empty one (a last chunk with only its finish
    reason). The SDK builds chunks without validating them, so each may lack any of it."""
    from openai.types.chat.chat_completion_chunk import ChoiceDelta

    if getattr(chunk, "choices", None) is None:
        chunk.choices = []
    for choice in chunk.choices:
        if getattr(choice, "index", None) is None:
            choice.index = 0
        if getattr(choice, "delta", None) is None:
            choice.delta = ChoiceDelta()
        for call in getattr(choice.delta, "tool_calls", None) or ():
            if getattr(call, "index", None) is None:
                call.index = 0
    return chunk


async def _shut(chunks: openai.AsyncStream[ChatCompletionChunk]) -> None:
    """Close a stream's response, even while the reader is being cancelled."""
    with anyio.CancelScope(shield=True):
        await chunks.close()


def _cap(body: dict[str, Any]) -> int | None:
    """The most tokens ``body`` let the reply have, under either of its names."""
    cap = body.get("max_tokens", body.get("max_completion_tokens"))
    return cap if isinstance(cap, int) else None


def _is_event_stream(response: httpx.Response) -> bool:
    kind: str = response.headers.get("content-type", "")
    return kind.startswith("text/event-stream")


def _new_client() -> httpx.AsyncClient:
    import httpx

    # Retries belong to the run's phases, never to the transport.
    transport = httpx.AsyncHTTPTransport(retries=0, verify=_tls())
    return httpx.AsyncClient(transport=transport)


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for every client: loading the CA bundle takes a tenth of a second."""
    import httpx

    return httpx.create_ssl_context()


def _server_message(response: httpx.Response) -> str:
    """The server's own words about an error, else the start of its body."""
    said = server_said(response.content)
    return said or _excerpt(response.content) or response.reason_phrase or "no message"


def _excerpt(content: bytes) -> str:
    return clip(content[:EXCERPT_CHARS].decode("utf-8", "replace").strip())
