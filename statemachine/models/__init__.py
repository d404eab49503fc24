"""statemachine.models: the model adapters, each a :class:`~statemachine.Model`.

- :class:`OpenAICompatibleModel` (with :class:`TokenPrices`): any server that speaks
  the OpenAI chat-completions protocol over HTTP (needs httpx);
- :class:`LlamaCppModel` (with :class:`LlamaCppConfig`): a GGUF file run in this
  process by llama.cpp (the ``local`` extra).

Each adapter's module is imported on first use of one of its names, so that
``import statemachine.models`` loads neither httpx nor llama.cpp. The same objects
are importable from ``statemachine`` itself.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from ._llamacpp import LlamaCppConfig, LlamaCppModel
    from ._openai import OpenAICompatibleModel, TokenPrices

__all__ = ("LlamaCppConfig", "LlamaCppModel", "OpenAICompatibleModel", "TokenPrices")

_LAZY: Final[dict[str, str]] = {
    "LlamaCppConfig": "._llamacpp",
    "LlamaCppModel": "._llamacpp",
    "OpenAICompatibleModel": "._openai",
    "TokenPrices": "._openai",
}


def _lazy_attribute(name: str) -> object:
    """The public name ``name`` from the adapter module that defines it, imported now."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value: object = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def _names() -> list[str]:
    """What ``dir(statemachine.models)`` lists: the names defined so far and the lazy ones."""
    return sorted(set(globals()) | set(_LAZY))


if not TYPE_CHECKING:  # hidden from the type checkers, so a misspelt name stays an error
    __getattr__ = _lazy_attribute
    __dir__ = _names
