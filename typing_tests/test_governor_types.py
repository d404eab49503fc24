"""The loop governor's public types: a loop state's actions read like a tuple of records,
similarities are plain callables (or signing ones), and a governor is frozen.

``LoopState.actions`` is an ``ActionLog``: a ``Sequence[ActionRecord]`` whose item is a
record and whose slice is a tuple, so code written against the old tuple reads the same;
a log is never changed in place (``appended`` and ``replaced`` make new ones).

``LoopState`` is a slotted frozen attrs class (a pydantic model before 0.1.0): its
constructor takes its fields by keyword, with their types, and it is never changed in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import assert_type

import attrs

from statemachine import (
    ActionRecord,
    EmbeddingSimilarity,
    LoopGovernor,
    LoopState,
    SignedSimilarity,
    Similarity,
    lexical_similarity,
)


def actions_read_like_a_tuple(loop: LoopState) -> ActionRecord | None:
    actions: Sequence[ActionRecord] = loop.actions
    assert_type(loop.actions[-1], ActionRecord)
    assert_type(loop.actions[-3:], tuple[ActionRecord, ...])
    failed = [action for action in loop.actions if action.outcome == "failed"]
    return failed[0] if failed else (actions[0] if len(actions) else None)


def a_log_is_never_changed_in_place(loop: LoopState, record: ActionRecord) -> None:
    loop.actions.append(record)  # type: ignore[attr-defined]  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType]


def similarities_are_callables(first: str, second: str) -> float:
    def same_words(a: str, b: str) -> float:
        return 1.0 if set(a.split()) == set(b.split()) else 0.0

    plain: Similarity = same_words
    lexical: Similarity = lexical_similarity
    LoopGovernor(similarity=plain, evidence_similarity=lexical)
    LoopGovernor(similarity=EmbeddingSimilarity())
    return plain(first, second) + lexical(first, second)


def an_embedding_signs_texts_once(model: EmbeddingSimilarity, text: str) -> float:
    signed: SignedSimilarity[object] = model
    signature = signed.signature(text)
    return signed.compare(signature, signature)


def a_similarity_takes_two_texts() -> None:
    LoopGovernor(similarity=len)  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_governor_is_frozen(governor: LoopGovernor) -> None:
    governor.semantic_threshold = 0.5  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]


def a_loop_state_is_made_by_keyword(old: LoopState, record: ActionRecord) -> LoopState:
    loop = LoopState(actions=old.actions, evidence=("seen",), tool_iterations=1)
    assert_type(loop.tool_iterations, int)
    assert_type(loop.evidence, tuple[str, ...])
    assert_type(attrs.evolve(loop, paused="why"), LoopState)
    assert_type(LoopState.model_validate(loop.model_dump()), LoopState)
    return loop.record(record)


def a_loop_state_takes_no_positional_field(old: LoopState) -> None:
    LoopState(old.actions)  # type: ignore[call-arg]  # pyright: ignore[reportCallIssue]


def a_loop_state_field_has_its_type() -> None:
    LoopState(tool_iterations="3")  # type: ignore[arg-type]  # pyright: ignore[reportArgumentType]


def a_loop_state_is_frozen(loop: LoopState) -> None:
    loop.tool_iterations = 0  # type: ignore[misc]  # pyright: ignore[reportAttributeAccessIssue]
