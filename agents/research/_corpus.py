"""The offline corpus: a dozen short documents on coral reefs, and a search over them.

It ships as a Python module (no package data to install), so the demo and the tests
run without a network. :meth:`Corpus.search` ranks documents by how many of the
query's terms they contain (a crude stem: lower case, a plural ``s`` dropped, the
first five letters); :meth:`Corpus.fetch` returns one document whole. The same
:func:`terms` decides whether a rubric point is covered by the evidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import final

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CORPUS", "Corpus", "Document", "Hit", "terms"]

_STOPWORDS = frozenset(
    [
        "a",
        "about",
        "after",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "how",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "per",
        "the",
        "their",
        "them",
        "these",
        "this",
        "to",
        "was",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
    ]
)
_WORD = re.compile(r"[a-z0-9]+")


def _stem(word: str) -> str:
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return word[:5]


def terms(text: str) -> frozenset[str]:
    """The stems of the words of ``text`` that carry meaning (no stopwords)."""
    return frozenset(_stem(w) for w in _WORD.findall(text.lower()) if w not in _STOPWORDS)


class Document(BaseModel):
    """One document of the corpus."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str = Field(pattern=r"^d[0-9]{2}$")
    title: str = Field(min_length=1, max_length=60)
    summary: str = Field(min_length=1, max_length=160)
    text: str = Field(min_length=1, max_length=900)


class Hit(BaseModel):
    """A document a search found: what the model sees of it before fetching it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    doc_id: str = Field(min_length=1, max_length=20)
    title: str = Field(max_length=60)
    summary: str = Field(max_length=160)


@final
class Corpus:
    """Documents by id, with a term-overlap search."""

    __slots__ = ("_documents", "_terms")

    def __init__(self, documents: Iterable[Document]) -> None:
        self._documents = {document.doc_id: document for document in documents}
        self._terms = {
            doc_id: terms(f"{d.title} {d.summary} {d.text}")
            for doc_id, d in self._documents.items()
        }

    def __len__(self) -> int:
        return len(self._documents)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._documents

    @property
    def ids(self) -> tuple[str, ...]:
        """Every document id, in order."""
        return tuple(self._documents)

    def rank(self, query: str, *, limit: int = 2) -> tuple[Hit, ...]:
        """The ``limit`` documents sharing the most terms with ``query`` (ties: by id)."""
        wanted = terms(query)
        scored = [(len(wanted & found), doc_id) for doc_id, found in self._terms.items()]
        best = sorted((s for s in scored if s[0] > 0), key=lambda s: (-s[0], s[1]))[:limit]
        return tuple(self._hit(doc_id) for _, doc_id in best)

    async def search(self, query: str) -> tuple[Hit, ...]:
        """:meth:`rank` as a search backend (async, like a real search service)."""
        return self.rank(query)

    def fetch(self, doc_id: str) -> Document | None:
        """The whole document, or ``None`` if there is none with that id."""
        return self._documents.get(doc_id)

    def _hit(self, doc_id: str) -> Hit:
        d = self._documents[doc_id]
        return Hit(doc_id=d.doc_id, title=d.title, summary=d.summary)


def _doc(doc_id: str, title: str, summary: str, text: str) -> Document:
    return Document(doc_id=doc_id, title=title, summary=summary, text=" ".join(text.split()))


CORPUS = Corpus(
    [
        _doc(
            "d01",
            "Marine heatwaves and coral bleaching",
            "Heat stress is the main cause of mass coral bleaching: water 1 C above the "
            "usual summer maximum for weeks.",
            """When sea temperature stays about one degree above the usual summer maximum
            for several weeks, corals expel the symbiotic algae that feed them and turn
            white. Marine heatwaves driven by ocean warming caused every recorded mass
            bleaching event. Strong sunlight and calm water make it worse.""",
        ),
        _doc(
            "d02",
            "Bleached is not dead",
            "A bleached coral is starved, not dead; if the water cools within weeks, "
            "many corals regain their algae.",
            """Bleaching is a stress response. Corals can survive for weeks without their
            algae by feeding on plankton. If the heat stress ends early, most colonies
            regain their colour; if it lasts, they starve and disease spreads.""",
        ),
        _doc(
            "d03",
            "How long reefs take to recover",
            "Recovery time after severe bleaching is 10 to 15 years for fast-growing "
            "corals, longer for massive ones.",
            """Surveys after the 1998 and 2016 events show that reefs need 10 to 15 years
            of recovery time to regain coral cover when fast-growing branching corals
            return, and decades for slow massive corals. Bleaching events now come every
            6 years on average, less than the recovery time.""",
        ),
        _doc(
            "d04",
            "Local management of reefs",
            "Local management cannot stop ocean warming, but it changes how well a reef "
            "copes with heat and how fast it comes back.",
            """Effective local actions are cutting nutrient and sediment runoff from farms,
            treating sewage, limiting fishing of grazing fish, and installing moorings so
            anchors do not break coral. Reefs with clean water and many grazers recover
            faster after bleaching. These actions buy time; they do not replace cutting
            emissions.""",
        ),
        _doc(
            "d05",
            "Parrotfish and grazing",
            "Grazing fish keep seaweed off bare reef, leaving space for young corals to settle.",
            """Parrotfish and surgeonfish graze algae from dead coral skeletons. Where they
            are overfished, seaweed takes over and coral larvae cannot settle. Marine
            protected areas that ban their capture help reefs recover.""",
        ),
        _doc(
            "d06",
            "Ocean acidification",
            "Carbon dioxide dissolving in seawater lowers its pH and slows how fast "
            "corals build their skeletons.",
            """As the ocean absorbs carbon dioxide, carbonate ions become scarcer. Corals
            then calcify more slowly and reef frameworks erode faster. Acidification
            adds to heat stress but does not by itself bleach corals.""",
        ),
        _doc(
            "d07",
            "Degree heating weeks",
            "Degree heating weeks add up heat stress over 12 weeks; 4 predicts "
            "bleaching and 8 predicts widespread mortality.",
            """Satellite monitoring adds up how far and how long sea surface temperature
            exceeds the summer maximum. The sum, in degree heating weeks, forecasts
            bleaching before it shows and lets managers plan surveys.""",
        ),
        _doc(
            "d08",
            "Coral restoration nurseries",
            "Nurseries grow coral fragments on ropes and frames and plant them back on "
            "damaged reef, one colony at a time.",
            """Restoration gardens raise fragments of fast-growing coral and outplant them.
            Survival can be high, but each project covers a small patch of reef and needs
            divers for years. Heat-tolerant strains are being tested.""",
        ),
        _doc(
            "d09",
            "Sunscreen and reefs",
            "Some sunscreen chemicals harm coral larvae in the laboratory; their effect "
            "on whole reefs is unclear.",
            """Oxybenzone damaged coral larvae in laboratory tests, and some islands have
            banned it. Concentrations measured on most reefs are far lower, and no study
            has linked sunscreen to mass bleaching.""",
        ),
        _doc(
            "d10",
            "Crown-of-thorns starfish",
            "Outbreaks of coral-eating starfish follow nutrient runoff; divers cull them "
            "to protect high-value reefs.",
            """Crown-of-thorns starfish larvae survive better in water rich in nutrients, so
            outbreaks often follow floods. Culling by injection protects chosen reefs but
            cannot clear a whole region.""",
        ),
        _doc(
            "d11",
            "A history of mass bleaching",
            "Global mass bleaching struck in 1998, 2010, 2014 to 2017 and 2023 to 2024, "
            "each time during record ocean heat.",
            """The first global event, in 1998, followed a strong El Nino. The 2014 to 2017
            event lasted three years and hit three quarters of the world's reefs. The
            fourth began in 2023.""",
        ),
        _doc(
            "d12",
            "Tourism on reefs",
            "Divers, anchors and coastal building damage reefs locally; fees from tourism "
            "also pay for reef protection.",
            """Careless diving and anchoring break coral, and hotels add runoff. Well-run
            parks charge visitor fees that fund rangers, moorings and monitoring.""",
        ),
    ]
)
