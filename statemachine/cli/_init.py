"""``statemachine init``: make a new, empty runs store, the one command that does.

Every other command refuses a store option that names no store (``_options``), so a
mistyped path never becomes a new, empty store. ``init`` makes one on purpose: a SQLite
file where there is none (or an empty one), or the ``statemachine_`` tables in a
PostgreSQL database's current schema. A store there already is left as it is (exit
0, and it says so); a folder, a file that is not SQLite, or another application's
database is refused (exit 2).
"""

from __future__ import annotations

import argparse

import anyio

from .. import Checkpointer
from ._options import Refusal, close_store, open_store

__all__ = ["run"]


def run(args: argparse.Namespace) -> int:
    """Make the store the options name, unless it is there; the exit code."""
    code: int = anyio.run(_init, args)
    return code


async def _init(args: argparse.Namespace) -> int:
    try:
        there = await open_store(args)
    except Refusal as refusal:
        if refusal.code != 2:  # not "no store there": it cannot be reached, say
            raise
    else:
        await close_store(there)
        print(f"{_where(there)} is a runs store already; nothing was changed")
        return 0
    store = await open_store(args, create=True)  # refuses another application's database
    try:
        await store.registry(status=())  # a store makes its tables when first used
    except Exception as error:
        raise Refusal(f"cannot make the store ({error})") from error
    finally:
        await close_store(store)
    print(f"made a new, empty runs store: {_where(store)}")
    return 0


def _where(store: Checkpointer) -> str:
    """The store's name as its own messages give it (a DSN without its password)."""
    return str(getattr(store, "_where", type(store).__name__))
