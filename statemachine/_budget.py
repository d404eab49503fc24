"""Budgets: limits on tokens, cost, tool calls and wall-clock time, checked before a spend.

``Budget`` is the limit (configuration); ``Spend`` is what a run has used so far and
travels inside every phase, so a checkpoint of the phase carries it. A check returns
the reason an action may not run (naming the budget) or ``None``; it never spends.
Sums and differences of money go through ``_money``'s exact helpers, so a check's
answer does not depend on the ambient ``decimal`` context; a limit that is negative,
not a number or infinite is refused when the ``Budget`` is made.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from decimal import Decimal, DecimalException
from typing import Any, Literal, cast

import attrs
from pydantic import BaseModel, Field, ValidationInfo, field_validator

from ._fast._making import making_class
from ._money import EXACT, Money, money_difference, money_sum, to_money

__all__ = ["Budget", "Spend"]


def _crosses(used: int, add: int, limit: int, open_ended: bool) -> bool:
    return used + add > limit or (open_ended and used >= limit)


_LIMIT_NAMES = {
    "tokens": "token budget",
    "cost": "cost budget",
    "tool_calls": "tool-call budget",
    "wall_clock": "wall-clock budget",
}


class Budget(BaseModel, frozen=True, extra="forbid", defer_build=True):
    """Limits for one run; ``None`` means no limit of that kind.

    Every limit is 0 or more (the wall clock more than 0 seconds) and finite; a cost
    limit is exact ``Money``. Anything else is refused with a ``ValidationError``
    naming the field (a ``ConfigError`` when it comes through ``Agent.from_config``).
    """

    tokens: int | None = None
    cost: Money | None = None
    tool_calls: int | None = None
    wall_clock: float | None = Field(default=None, description="seconds")

    @field_validator("tokens", "cost", "tool_calls")
    @classmethod
    def _not_negative(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and value < 0:
            name = _LIMIT_NAMES[str(info.field_name)]
            raise ValueError(
                f"a {name} must not be negative, got {value}: give the most the run may "
                "use (0 allows nothing), or None for no limit"
            )
        return value

    @field_validator("wall_clock")
    @classmethod
    def _some_time(cls, value: float | None) -> float | None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(
                f"a wall-clock budget must be a finite number of seconds above 0, got "
                f"{value}: give the most seconds the run may take, or None for no limit"
            )
        return value

    def refuse(
        self,
        spent: Spend,
        *,
        elapsed: float,
        action: str,
        tokens: int = 0,
        cost: Decimal = Decimal(0),
        tool_calls: int = 0,
        open_ended: bool = False,
    ) -> str | None:
        """Why ``action``, which would add the given amounts, may not run; or ``None``.

        A limit is crossed when the spend *after* the action would be above it, so a
        budget of ``$1000`` admits actions totalling exactly ``$1000``. An
        ``open_ended`` action (a model call, whose usage is known only afterwards) is
        refused once any limit is already reached.
        """
        if self.wall_clock is not None and elapsed >= self.wall_clock:
            return (
                f"wall-clock budget exhausted: {elapsed:.2f}s of {self.wall_clock:g}s used "
                f"before {action}"
            )
        # A count (tool calls) is known ahead even for an open-ended action.
        if self.tool_calls is not None and spent.tool_calls + tool_calls > self.tool_calls:
            return (
                f"tool-call budget: {action} would make {spent.tool_calls + tool_calls} "
                f"tool calls, {self.tool_calls} allowed"
            )
        if self.tokens is not None and _crosses(spent.tokens, tokens, self.tokens, open_ended):
            return (
                f"token budget: {spent.tokens} of {self.tokens} tokens used, no room for {action}"
            )
        if self.cost is not None:
            total = money_sum(spent.cost, cost)
            if total > self.cost or (open_ended and spent.cost >= self.cost):
                return (
                    f"cost budget: {action} would bring the run's cost to ${total} "
                    f"of ${self.cost} allowed (${spent.cost} spent so far)"
                )
        return None

    def remaining_seconds(self, elapsed: float) -> float | None:
        """Seconds left of the wall-clock budget, or ``None`` when there is no limit."""
        if self.wall_clock is None:
            return None
        return max(0.0, self.wall_clock - elapsed)

    def left(self, spent: Spend) -> dict[str, str]:
        """What remains of each limited budget, for logs and reports."""
        remaining: dict[str, str] = {}
        if self.tokens is not None:
            remaining["tokens"] = str(self.tokens - spent.tokens)
        if self.cost is not None:
            remaining["cost"] = str(money_difference(self.cost, spent.cost))
        if self.tool_calls is not None:
            remaining["tool_calls"] = str(self.tool_calls - spent.tool_calls)
        return remaining


def admits_call(budget: Budget, spent: Spend, elapsed: float, cost: Any) -> bool:
    """True when ``budget.refuse(spent, elapsed=elapsed, action=..., tool_calls=1,
    cost=cost)`` returns ``None`` (whatever the action's words), known without its frame or
    texts; False when it may not: then ask ``refuse``, whose text says why. Only a
    ``Budget`` itself with a ``Spend`` and a ``Decimal`` cost, by exact type (a subclass's
    ``refuse`` may say otherwise); each test below is the negation of one of ``refuse``'s."""
    if type(budget) is not Budget or type(spent) is not Spend or type(cost) is not Decimal:
        return False
    wall_clock, tool_calls, tokens, limit = (
        budget.wall_clock,
        budget.tool_calls,
        budget.tokens,
        budget.cost,
    )
    if wall_clock is not None and not elapsed < wall_clock:
        return False
    if tool_calls is not None and spent.tool_calls + 1 > tool_calls:
        return False
    if tokens is not None and spent.tokens > tokens:
        return False
    if limit is not None:
        try:  # money_sum(spent.cost, cost), the same sum
            total = _exact_add(spent.cost, cost)
        except DecimalException:
            return False  # refuse raises the ValueError that names the sum
        if total > limit:
            return False
    return True


def _whole(name: str, value: object) -> int:
    """A ``Spend`` count: a whole number (an ``int``, not a ``bool``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"Spend.{name} is a whole number, got {value!r}")
    return int(value)


def _tokens(value: object) -> int:
    return _whole("tokens", value)


def _tool_calls(value: object) -> int:
    return _whole("tool_calls", value)


def _model_calls(value: object) -> int:
    return _whole("model_calls", value)


@attrs.frozen(kw_only=True)
class Spend:
    """What a run has used so far. Immutable: ``add`` returns a new ``Spend``.

    A slotted frozen class, not a pydantic model (it is made at nearly every
    transition): the counts are whole numbers and ``cost`` is exact ``Money``, checked
    when one is made; ``model_dump``, ``model_validate`` and ``model_construct`` read and
    write what a pydantic model of these fields would.
    """

    tokens: int = attrs.field(default=0, converter=_tokens)
    cost: Money = attrs.field(default=Decimal(0), converter=to_money)
    tool_calls: int = attrs.field(default=0, converter=_tool_calls)
    model_calls: int = attrs.field(default=0, converter=_model_calls)

    def add(
        self,
        *,
        tokens: int = 0,
        cost: Decimal = Decimal(0),
        tool_calls: int = 0,
        model_calls: int = 0,
    ) -> Spend:
        """A new ``Spend`` with the amounts added."""
        global _zero
        was = self.cost
        if cost is _zero and was is _kept:  # the last case below, known by identity
            total = was
        elif type(cost) is not Decimal or cost:  # not an exact zero: the sum
            try:  # money_sum(self.cost, cost) without its frame and loop: the same sum
                total = _exact_add(was, cost)
            except DecimalException:
                total = money_sum(was, cost)  # raises the ValueError that names the sum
        elif was is _kept and cost.adjusted() >= 0:  # a zero's adjusted() is its exponent
            total = was  # the sum, spelled as ``was`` (see _kept): the cost stays
            _zero = cost  # a Decimal itself (see the test above): known by identity next
        else:
            total = _zero_added(was, cost)
        # _spend(...) in this frame
        spend: Any = _make()
        spend.tokens = self.tokens + tokens
        spend.cost = total
        spend.tool_calls = self.tool_calls + tool_calls
        spend.model_calls = self.model_calls + model_calls
        spend.__class__ = Spend
        made: Spend = spend
        return made

    def model_dump(self, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """The fields as a dict, in their order (``cost`` as text in JSON mode, as
        pydantic writes a ``Decimal``)."""
        return {
            "tokens": self.tokens,
            "cost": str(self.cost) if mode == "json" else self.cost,
            "tool_calls": self.tool_calls,
            "model_calls": self.model_calls,
        }

    def __str__(self) -> str:
        """``tokens=0 cost=Decimal('0') tool_calls=0 model_calls=0``, as pydantic's."""
        return " ".join(f"{name}={value!r}" for name, value in self.model_dump().items())

    def model_dump_json(self) -> str:
        """The fields as compact JSON, as pydantic writes them (``cost`` as text)."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"))

    @classmethod
    def model_validate(cls, value: object) -> Spend:
        """A ``Spend`` from a mapping of its fields (or the ``Spend`` itself); ``TypeError``
        or ``ValueError`` naming what is wrong (another key, a count that is not whole,
        money that is not exact)."""
        if isinstance(value, Spend):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(f"a Spend is read from an object of its fields, got {value!r}")
        fields = cast("Mapping[str, Any]", value)
        unknown = sorted(set(fields) - set(_SPEND_FIELDS))
        if unknown:
            raise ValueError(f"a Spend has no field {unknown[0]!r} (its fields: {_SPEND_FIELDS})")
        return cls(**fields)

    @classmethod
    def model_construct(cls, **values: Any) -> Spend:
        """A ``Spend`` of trusted values, not checked (a field not given is 0)."""
        return _spend(
            values.get("tokens", 0),
            values.get("cost", _NO_COST),
            values.get("tool_calls", 0),
            values.get("model_calls", 0),
        )


_SPEND_FIELDS = tuple(field.name for field in attrs.fields(Spend))
_NO_COST = Decimal(0)
_exact_add = EXACT.add
_same_spelling = EXACT.compare_total  # 0 for the very same spelling only, else 1 or -1

# A cost found spelled as its sum with a zero: an exact ``Decimal`` whose exact sum
# (``EXACT.add``) with ``Decimal(0)`` is spelled as itself (the same sign, digits and
# exponent). That holds for a finite cost of exponent 0 or less, not ``-0``, of at most
# ``EXACT.prec`` digits and not below the context's range (a number's adjusted exponent
# not below ``Emin``, a zero's exponent not below ``Etiny()``), and for an infinity or a
# quiet NaN. Its sum with any zero of exponent 0 or more is then spelled as itself too:
# the sum's exponent is the smaller of the two, its sign the cost's (``+0`` for ``+0``
# and any zero), its digits the cost's, so it fits ``EXACT`` as the cost does. ``EXACT``
# never changes and neither does a ``Decimal``: once found, always so
# (tests/test_budget_fast16_zero.py checks the rule against ``EXACT.add``).
_kept: Decimal | None = None

# A cost ``add`` found an exact ``Decimal`` zero of exponent 0 or more (``adjusted()``
# >= 0) while the spend's cost was ``_kept``: its sum with ``_kept`` is ``_kept`` (the
# rule above), and a ``Decimal`` never changes, so ``add`` knows the very same object again
# by identity (``cost is _zero``) without ``bool`` and ``adjusted``. At first ``add``'s
# own default, ``Decimal(0)``; then the last one found (a run's model replies share
# theirs: ``Usage``'s default). Only an object of the exact type is kept (``add`` keeps
# it in its own frame, where the cost is a ``Decimal`` itself).
_zero: object = (Spend.add.__kwdefaults__ or {})["cost"]


def _zero_added(was: Decimal, zero: Decimal) -> Decimal:
    """``money_sum(was, zero)`` for an exact ``Decimal`` zero, or ``was`` itself when
    ``was`` is an exact ``Decimal`` and the sum is spelled as it is (``compare_total``
    answers 0 for the very same spelling only); ``was`` is then kept in ``_kept`` when
    ``zero`` is spelled as ``Decimal(0)`` (``+0``, exponent 0), the sum that tells the
    rule above. Raises as ``money_sum``."""
    global _kept
    try:
        total = _exact_add(was, zero)
    except DecimalException:
        return money_sum(was, zero)  # raises the ValueError that names the sum
    if type(was) is Decimal and not _same_spelling(total, was):
        if not zero.adjusted() and not zero.is_signed():
            _kept = was
        return was
    return total


# A Spend being made by _spend and Spend.add: see making_class. Its ``__init__`` is
# ``object``'s, so ``_make()`` is ``object.__new__(_Making)`` by the type's own call (one
# object, nothing stored, without ``object.__new__``'s argument checks).
_Making = making_class(Spend)
type.__setattr__(_Making, "__init__", object.__init__)
_make: Callable[[], Any] = _Making


def _spend(tokens: int, cost: Decimal, tool_calls: int, model_calls: int) -> Spend:
    """A ``Spend`` of values that are valid already (sums of valid ones), unchecked."""
    spend: Any = _make()
    spend.tokens = tokens
    spend.cost = cost
    spend.tool_calls = tool_calls
    spend.model_calls = model_calls
    spend.__class__ = Spend
    made: Spend = spend
    return made
