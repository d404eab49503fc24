"""statemachine.models: the model adapters, each a :class:`~statemachine.Model`.

- :class:`OpenAICompatibleModel`: any server that speaks the OpenAI chat-completions
  protocol over HTTP, through the official ``openai`` SDK (the ``openai`` extra);
- :class:`AnthropicModel`: Anthropic's Messages API, through the official
  ``anthropic`` SDK (the ``anthropic`` extra);
- :class:`TokenPrices`: what the two HTTP adapters' tokens cost;
- :class:`LlamaCppModel` (with :class:`LlamaCppConfig`): a GGUF file run in this
  process by llama.cpp (the ``local`` extra).

Each adapter's module is imported on first use of one of its names, so that
``import statemachine.models`` loads neither httpx, the two SDKs nor llama.cpp.
The same objects are importable from ``statemachine`` itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._anthropic import AnthropicModel
    from ._llamacpp import LlamaCppConfig, LlamaCppModel
    from ._openai import OpenAICompatibleModel
    from ._prices import TokenPrices

__all__ = (
    "AnthropicModel",
    "LlamaCppConfig",
    "LlamaCppModel",
    "OpenAICompatibleModel",
    "TokenPrices",
)

_LAZY: Final[dict[str, str]] = {
    "AnthropicModel": "._anthropic",
    "LlamaCppConfig": "._llamacpp",
    "LlamaCppModel": "._llamacpp",
    "OpenAICompatibleModel": "._openai",
    "TokenPrices": "._prices",
}


if not TYPE_CHECKING:  # hidden from the type checkers, so a misspelt name stays an error
    __getattr__, __dir__ = lazy_names(__name__, globals(), _LAZY)
