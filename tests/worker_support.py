"""Runner factories for worker processes started by the tests (``--agent worker_support:...``).

A worker subprocess imports this module from the tests folder (on its PYTHONPATH).
"""

from __future__ import annotations

import os
from typing import Any

import anyio

from agents.support import DeskModel, worker_runner
from statemachine import Checkpointer, ModelReply, ModelRequest, Runner

DELAY_VAR = "WORKER_TEST_MODEL_DELAY"


class SlowDesk(DeskModel):
    """The desk model, taking ``$WORKER_TEST_MODEL_DELAY`` seconds per answer."""

    async def complete(self, request: ModelRequest) -> ModelReply:
        """Wait, then answer as the desk does."""
        await anyio.sleep(float(os.environ.get(DELAY_VAR, "0.2")))
        return await super().complete(request)


def slow_runner(checkpointer: Checkpointer) -> Runner[Any]:
    """The support agent's worker runner with a slow model: runs are caught mid-way."""
    return worker_runner(checkpointer, model=SlowDesk())


def not_a_runner(checkpointer: Checkpointer) -> str:
    """A factory that returns something else: the worker refuses to start."""
    return "a runner"
