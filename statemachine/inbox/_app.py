"""The inbox as an ASGI application (Starlette): pages, log-in, CSRF, live fragments.

Every page and action needs a logged-in operator (the packaged stylesheet and
script excepted: they hold no data). A session is a cookie signed with the
configured key (Starlette's ``SessionMiddleware``, itsdangerous underneath), strict
same-site and HTTP-only, refused after ``session_minutes`` however active it was.
Every state-changing request (log-in, log-out, each action) carries the session's
CSRF token in its form, compared in constant time. Pages are Jinja2 templates with
autoescape on, served with a Content-Security-Policy that allows no inline script.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any, Final

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import Agent, Checkpointer, UnknownRunError
from ._config import InboxConfig, Operator
from ._deciding import ACTIONS, AuditTrail, Decided, decide
from ._notify import WaitingNotifier
from ._reading import inbox_rows, run_page

__all__ = ["inbox_app"]

_HEADERS: Final = (
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
_STATIC: Final = {"inbox.js": "text/javascript", "inbox.css": "text/css"}


class _SecurityHeaders:
    """Adds the headers of :data:`_HEADERS` to every response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_HEADERS]
            await send(message)

        await self.app(scope, receive, sending)


def _money(value: object) -> str:
    if isinstance(value, Decimal):
        return f"${value:,.2f}"
    return "" if value is None else str(value)


class _Inbox:
    """The routes' shared state: the store, the configuration, the agents, the audit trail."""

    def __init__(
        self,
        store: Checkpointer,
        config: InboxConfig,
        agents: Mapping[str, Agent[Any]],
        clock: Callable[[], float],
    ) -> None:
        self.store = store
        self.clock = clock
        self.config = config
        self.agents = agents
        self.audit = AuditTrail(config.audit_log)
        env = jinja2.Environment(
            loader=jinja2.PackageLoader("statemachine.inbox", "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        env.filters["money"] = _money
        self.templates = Jinja2Templates(env=env)

    # --- who is asking -----------------------------------------------------------------------

    def operator(self, request: Request) -> Operator | None:
        """The logged-in operator, if the session is signed, not expired and names one."""
        name = request.session.get("operator")
        since = request.session.get("since")
        if not isinstance(name, str) or not isinstance(since, int | float):
            return None
        if self.clock() - since > self.config.session_minutes * 60:
            request.session.clear()
            return None
        return self.config.operators.get(name)

    @staticmethod
    def csrf(request: Request) -> str:
        token = request.session.get("csrf")
        if not isinstance(token, str):
            token = request.session["csrf"] = secrets.token_urlsafe(32)
        return token

    async def form(self, request: Request) -> dict[str, str]:
        """The posted form, once its CSRF token is the session's (else :class:`Decided`)."""
        form = await request.form()
        given = form.get("csrf")
        expected = request.session.get("csrf")
        if (
            not isinstance(given, str)
            or not isinstance(expected, str)
            or not secrets.compare_digest(given.encode(), expected.encode())
        ):
            raise Decided("the form's CSRF token is missing or wrong; reload the page", status=403)
        return {key: value for key, value in form.items() if isinstance(value, str)}

    def page(
        self, request: Request, name: str, context: dict[str, Any], status: int = 200
    ) -> Response:
        operator = self.operator(request)
        context = {
            "operator": operator,
            "csrf": self.csrf(request),
            "flash": request.session.pop("flash", None),
            "error": None,
            **context,
        }
        return self.templates.TemplateResponse(request, name, context, status_code=status)

    # --- pages -------------------------------------------------------------------------------

    async def login_page(self, request: Request) -> Response:
        return self.page(request, "login.html", {"refused": ""})

    async def login(self, request: Request) -> Response:
        try:
            form = await self.form(request)
        except Decided as error:
            return self.page(request, "login.html", {"refused": str(error)}, error.status)
        name, secret = form.get("name", ""), form.get("password", "")
        operator = await anyio.to_thread.run_sync(self.config.check_login, name, secret)
        if operator is None:
            return self.page(request, "login.html", {"refused": "wrong name or password"}, 401)
        request.session.clear()  # a new session: nothing carried over from before the log-in
        request.session.update(operator=operator.name, since=self.clock())
        self.csrf(request)
        return RedirectResponse("/", status_code=303)

    async def logout(self, request: Request) -> Response:
        await self.form(request)
        request.session.clear()
        return RedirectResponse("/login", status_code=303)

    async def inbox(self, request: Request) -> Response:
        rows = await inbox_rows(self.store)
        return self.page(request, "inbox.html", {"rows": rows})

    async def inbox_live(self, request: Request) -> Response:
        rows = await inbox_rows(self.store)
        return self.page(request, "_rows.html", {"rows": rows})

    async def run(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return self.page(request, "run.html", await self._run(run_id))

    async def run_live(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        return self.page(request, "_run_live.html", await self._run(run_id))

    async def _run(self, run_id: str) -> dict[str, Any]:
        page = await run_page(self.store, run_id, self.agents)
        entries = await anyio.to_thread.run_sync(self.audit.read)
        decisions = [entry for entry in entries if entry.get("run_id") == run_id]
        return {"run": page, "actions": ACTIONS, "decisions": decisions}

    async def act(self, request: Request) -> Response:
        run_id, action = request.path_params["run_id"], request.path_params["action"]
        operator = self.operator(request)
        assert operator is not None  # _guarded let only a logged-in operator through
        try:
            form = await self.form(request)
            if action not in ACTIONS:
                raise Decided(f"there is no action {action!r}", status=404)
            source = request.client.host if request.client else "unknown"
            said = await decide(
                self.store, self.audit, action, run_id, operator, form, source=source
            )
        except Decided as error:
            context = await self._run(run_id)
            return self.page(request, "run.html", {**context, "error": str(error)}, error.status)
        request.session["flash"] = said
        return RedirectResponse(f"/runs/{run_id}", status_code=303)

    async def audit_page(self, request: Request) -> Response:
        entries = await anyio.to_thread.run_sync(self.audit.read)
        return self.page(request, "audit.html", {"entries": entries[::-1][:500]})

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return PlainTextResponse("not found", status_code=404)
        from importlib.resources import files

        text = files("statemachine.inbox").joinpath("static", name).read_text(encoding="utf-8")
        return Response(text, media_type=_STATIC[name])


_Endpoint = Callable[[Request], Awaitable[Response]]


def _guarded(inbox: _Inbox, endpoint: _Endpoint, *, page: bool) -> _Endpoint:
    """``endpoint`` for a logged-in operator only: others go to the log-in page (a page)
    or get 401 (a fragment or an action); a run never saved is a 404, a refusal its status."""

    async def guarded(request: Request) -> Response:
        if inbox.operator(request) is None:
            if page and request.method == "GET":
                return RedirectResponse("/login", status_code=303)
            return PlainTextResponse("log in first", status_code=401)
        try:
            return await endpoint(request)
        except UnknownRunError as error:
            return PlainTextResponse(f"no run {error.run_id!r}", status_code=404)
        except Decided as error:
            return PlainTextResponse(str(error), status_code=error.status)

    return guarded


def inbox_app(
    store: Checkpointer,
    config: InboxConfig,
    *,
    agents: Mapping[str, Agent[Any]] | None = None,
    notify: bool = True,
    clock: Callable[[], float] = time.time,
) -> Starlette:
    """The inbox on ``store``, for the operators of ``config``.

    ``agents`` (by name) lets a run's page draw its agent's own graph and budgets; a
    run of another agent gets the library's standard graph. With ``notify`` and a
    ``[webhook]`` in the configuration, the application also announces each run that
    starts waiting for a person (:class:`WaitingNotifier`) while it serves. ``clock``
    (seconds, as :func:`time.time`) times the sessions.
    """
    inbox = _Inbox(store, config, agents or {}, clock)

    def route(path: str, endpoint: _Endpoint, *, page: bool = True, post: bool = False) -> Route:
        methods = ["POST"] if post else ["GET"]
        return Route(path, _guarded(inbox, endpoint, page=page), methods=methods)

    @asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncGenerator[None]:
        webhook = config.webhook if notify else None
        if webhook is None:
            yield
            return
        notifier = WaitingNotifier(store, webhook, link=config.link)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(notifier.run)
            yield
            tasks.cancel_scope.cancel()

    routes = [
        Route("/login", inbox.login_page, methods=["GET"]),
        Route("/login", inbox.login, methods=["POST"]),
        Route("/static/{name}", inbox.static, methods=["GET"]),
        route("/logout", inbox.logout, post=True),
        route("/", inbox.inbox),
        route("/live/inbox", inbox.inbox_live, page=False),
        route("/audit", inbox.audit_page),
        route("/runs/{run_id}", inbox.run),
        route("/live/runs/{run_id}", inbox.run_live, page=False),
        route("/runs/{run_id}/{action}", inbox.act, page=False, post=True),
    ]
    middleware = [
        Middleware(_SecurityHeaders),
        Middleware(
            SessionMiddleware,
            secret_key=config.session_key,
            session_cookie="statemachine_inbox",
            max_age=config.session_minutes * 60,
            same_site="strict",
            https_only=config.secure_cookies,
        ),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
