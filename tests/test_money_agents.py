"""The shipped agents' own money arithmetic is exact whatever the caller's decimal context."""

from __future__ import annotations

import decimal
from decimal import Decimal
from pathlib import Path

import pytest

from agents.research._door import _sum
from agents.support._payments import PaymentsService, RefundRefusedError
from agents.travel._agent import FakeProvider
from statemachine import Usage

# Three digits, and every signal trapped: any use of the ambient context shows.
HOSTILE = decimal.Context(prec=3, Emax=3, Emin=-3, traps=list(decimal.Context().flags))


def test_travel_charges_total_exactly() -> None:
    """$800.00 + $600 + $0.004 is $1400.004, not the 1.40E+3 three digits would give."""
    provider = FakeProvider()
    with decimal.localcontext(HOSTILE):
        provider.charge("flight", Decimal("800.00"))
        provider.charge("hotel", Decimal("600"))
        provider.charge("fee", Decimal("0.004"))
        total = provider.total
    assert total == Decimal("1400.004")
    assert FakeProvider().total == 0


def test_refunds_sum_and_cap_exactly(tmp_path: Path) -> None:
    """What is refunded, and what is left under the order's limit, keep every digit."""
    with PaymentsService(tmp_path / "payments.db") as payments, decimal.localcontext(HOSTILE):
        payments.refund(1001, Decimal("137.31"), "part", key="k1", limit=Decimal("137.32"))
        assert payments.refunded(1001) == Decimal("137.31")
        with pytest.raises(RefundRefusedError) as refused:
            payments.refund(1001, Decimal("0.02"), "rest", key="k2", limit=Decimal("137.32"))
        assert refused.value.left == Decimal("0.01")
        payments.refund(1001, Decimal("0.01"), "rest", key="k3", limit=Decimal("137.32"))
        assert payments.refunded(1001) == Decimal("137.32")
        assert payments.total() == Decimal("137.32")


def test_the_research_door_adds_usage_exactly() -> None:
    """Two calls' costs add without rounding to the caller's three digits."""
    with decimal.localcontext(HOSTILE):
        both = _sum(
            Usage(input_tokens=1, cost=Decimal("0.0015")),
            Usage(output_tokens=2, cost=Decimal("12.5")),
        )
    assert both == Usage(input_tokens=1, output_tokens=2, cost=Decimal("12.5015"))
