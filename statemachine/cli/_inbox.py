"""``statemachine inbox``: serve the approvals inbox (``statemachine.inbox``) with uvicorn.

``--hash-password`` reads a password from the terminal (or stdin) and prints its
argon2 hash; ``--new-token`` prints a fresh token and its hash: the configuration file
keeps the hash, the person keeps the secret.
"""

from __future__ import annotations

import argparse
import getpass
import ipaddress
import sys
from typing import Any

import anyio

from ._options import PROG, Refusal, close_store, open_store, resolve, runner_factory

__all__ = ["run"]


def _imported() -> Any:
    try:
        from .. import inbox
    except ImportError as error:
        raise Refusal(
            f"the inbox is not installed here ({error}); install its extra: "
            "pip install 'statemachine-agents[inbox]'"
        ) from None
    return inbox


def _secret() -> str:
    if sys.stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise Refusal("the two passwords differ")
        return first
    return sys.stdin.readline().rstrip("\n")


def run(args: argparse.Namespace) -> int:
    """Serve the inbox until interrupted, or print a hash; the exit code."""
    inbox = _imported()
    if args.hash_password:
        try:
            print(inbox.hash_secret(_secret()))
        except inbox.InboxConfigError as error:
            raise Refusal(str(error)) from None
        return 0
    if args.new_token:
        token, hashed = inbox.new_token()
        print(f"token (give it to the operator): {token}")
        print(f'token_hash = "{hashed}"')
        return 0
    if not args.config:
        raise Refusal(f"give the configuration file: {PROG} inbox --config inbox.toml", code=2)
    try:
        config = inbox.load_config(args.config)
    except inbox.InboxConfigError as error:
        raise Refusal(str(error), code=2) from None
    code: int = anyio.run(_serve, args, config, inbox)
    return code


def _agents(specs: list[str], store: Any) -> dict[str, Any]:
    """The agents the ``--agent`` modules' runners run, by name (for graphs and budgets).

    Each runner is built once, on the inbox's store, to read its agent; it runs nothing.
    """
    agents: dict[str, Any] = {}
    for spec in specs:
        if resolve(spec, noun="the agent module") is None:
            raise Refusal(f"{spec} names nothing")
        runner = runner_factory(spec)(store)
        agents[runner.agent.name] = runner.agent
    return agents


async def _serve(args: argparse.Namespace, config: Any, inbox: Any) -> int:
    import uvicorn

    host = args.host or config.bind
    port = args.port or config.port
    store = await open_store(args)
    try:
        agents = _agents(args.agent or [], store)
        if not _loopback(host):
            print(f"{PROG} inbox: {host} is not loopback: other machines can reach it", flush=True)
        app = inbox.inbox_app(store, config, agents=agents)
        server = uvicorn.Server(
            uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False)
        )
        print(f"{PROG} inbox: serving on http://{host}:{port} (Ctrl-C stops it)", flush=True)
        await server.serve()
    finally:
        await close_store(store)
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
