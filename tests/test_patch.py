"""State patches are applied to a copy and accepted whole or rejected whole."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal

from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, model_validator

from statemachine import Money, PatchAccepted, PatchRejected, apply_patch


class Customer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    verified: bool = False


class Ticket(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["open", "waiting", "closed"] = "open"
    priority: Literal["low", "normal", "critical"] = "normal"
    requires_human: bool = False
    refund: Money = Decimal("0")
    customer: Customer = Customer(name="Ada")

    @model_validator(mode="after")
    def critical_needs_a_person(self) -> Ticket:
        if self.priority == "critical" and not self.requires_human:
            raise ValueError("a critical ticket requires a human")
        return self


def no_reopening(old: Ticket, new: Ticket) -> str | None:
    if old.status == "closed" and new.status != "closed":
        return f"a closed ticket cannot go back to {new.status}"
    return None


def test_an_accepted_patch_is_a_new_state_and_the_old_one_is_untouched() -> None:
    """Patching makes a copy: the new state has the change, the old one is as it was."""
    old = Ticket()
    outcome = apply_patch(old, {"status": "waiting", "refund": "12.50"})
    assert isinstance(outcome, PatchAccepted)
    assert outcome.state.status == "waiting"
    assert outcome.state.refund == Decimal("12.50")
    assert outcome.changed == ("$.refund", "$.status")
    assert old == Ticket()


def test_a_nested_patch_merges_into_the_nested_model() -> None:
    """{"customer": {"verified": true}} changes that one field and keeps the name."""
    outcome = apply_patch(Ticket(), {"customer": {"verified": True}})
    assert isinstance(outcome, PatchAccepted)
    assert outcome.state.customer == Customer(name="Ada", verified=True)
    assert outcome.changed == ("$.customer.verified",)


def test_one_bad_field_rejects_the_whole_patch() -> None:
    """A valid status and an invalid refund: nothing is applied, not even the status."""
    old = Ticket()
    outcome = apply_patch(old, {"status": "waiting", "refund": "twelve"})
    assert isinstance(outcome, PatchRejected)
    assert outcome.state is old
    assert [(d.path, d.code.split(".")[0]) for d in outcome.diagnostics] == [("$.refund", "type")]


def test_a_float_refund_is_refused_like_any_float_money() -> None:
    """Money stays exact in a patch too: a Python float is refused, the state unchanged."""
    old = Ticket()
    outcome = apply_patch(old, {"refund": 12.5})
    assert isinstance(outcome, PatchRejected)
    assert outcome.state is old
    assert outcome.diagnostics[0].path == "$.refund"


def test_an_unknown_field_is_named_with_the_fields_that_exist() -> None:
    """A typo in a patch is refused whole, and the diagnostic lists the real fields."""
    outcome = apply_patch(Ticket(), {"statuss": "closed"})
    assert isinstance(outcome, PatchRejected)
    (diagnostic,) = outcome.diagnostics
    assert diagnostic.code == "patch.unknown_field"
    assert diagnostic.path == "$.statuss"
    assert diagnostic.message == "the state has no field 'statuss'"
    assert diagnostic.allowed_fixes == (
        "patch only these fields: customer, priority, refund, requires_human, status",
    )


def test_a_cross_field_rule_of_the_state_rejects_the_patch() -> None:
    """priority == "critical" without requires_human fails the state's own validator."""
    old = Ticket()
    outcome = apply_patch(old, {"priority": "critical"})
    assert isinstance(outcome, PatchRejected)
    assert outcome.state is old
    assert "a critical ticket requires a human" in outcome.diagnostics[0].message
    accepted = apply_patch(old, {"priority": "critical", "requires_human": True})
    assert isinstance(accepted, PatchAccepted)


def test_a_move_the_state_may_not_make_is_rejected() -> None:
    """A valid new state is still refused when the transition from the old one is not allowed."""
    closed = Ticket(status="closed")
    outcome = apply_patch(closed, {"status": "open"}, allowed=no_reopening)
    assert isinstance(outcome, PatchRejected)
    assert outcome.state is closed
    (diagnostic,) = outcome.diagnostics
    assert (diagnostic.code, diagnostic.message) == (
        "patch.transition",
        "a closed ticket cannot go back to open",
    )


def test_after_exhausted_attempts_the_state_stays_at_its_last_valid_version() -> None:
    """One good patch, then three bad ones: the state is the one the good patch made."""
    state = Ticket()
    first = apply_patch(state, {"status": "waiting"})
    assert isinstance(first, PatchAccepted)
    state = first.state
    for bad in ({"status": "lost"}, {"priority": "critical"}, {"refund": "a lot"}):
        outcome = apply_patch(state, bad)
        assert isinstance(outcome, PatchRejected)
        state = outcome.state
    assert state is first.state
    assert state.status == "waiting"


PATCH_VALUES: dict[str, Any] = {
    "status": st.sampled_from(["open", "waiting", "closed", "lost", 3]),
    "priority": st.sampled_from(["low", "normal", "critical", "urgent"]),
    "requires_human": st.sampled_from([True, False, "maybe"]),
    "refund": st.one_of(st.decimals(-10, 10, places=2), st.just("n/a"), st.just(1.5)),
    "nonsense": st.integers(),
}


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(st.sampled_from(sorted(PATCH_VALUES)), st.none()).flatmap(
        lambda keys: st.fixed_dictionaries({key: PATCH_VALUES[key] for key in keys})
    )
)
def test_a_patch_is_taken_whole_or_not_at_all(patch: dict[str, Any]) -> None:
    """For any patch: the old state back unchanged, or a valid state holding every patched value."""
    old = Ticket()
    outcome = apply_patch(old, patch)
    if isinstance(outcome, PatchRejected):
        assert outcome.state is old
        assert outcome.diagnostics
        return
    new = outcome.state
    assert Ticket.model_validate(new.model_dump()) == new
    for key, value in patch.items():
        assert getattr(new, key) == value
