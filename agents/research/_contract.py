"""The research contract: the brief, the rubric and the budget, frozen and hashed.

A :class:`Contract` is what the client asks for. ``contract.hash()`` is the SHA-256
of its canonical JSON (sorted keys, one spelling per number), so two equal contracts
have one hash and changing any field (a word of the brief, a rubric point, one
search of the budget) gives another. ``contract.approve(by=...)`` returns an
:class:`ApprovedContract` that records that hash, who approved it and when; the
run's context holds the approved contract, so every checkpoint of the run carries
the hash it was approved under.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field, model_validator

from statemachine import Budget, canonical_hash

__all__ = ["ApprovedContract", "Contract", "ResearchBudget"]


class ResearchBudget(BaseModel):
    """What one research run may use: searches, fetches, model tokens and seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    searches: int = Field(ge=0)
    fetches: int = Field(ge=0)
    tokens: int = Field(ge=1)
    seconds: float = Field(gt=0)

    def for_agent(self) -> Budget:
        """The library budget of the run's own steps: model tokens and wall-clock time.

        Searches and fetches are counted by the research tools (a ``BudgetMeter`` per
        tool call, rebuilt from the run's state), not by the library's tool-call count:
        one ``run_searches`` call is one tool call but many searches.
        """
        return Budget(tokens=self.tokens, wall_clock=self.seconds)


class Contract(BaseModel):
    """A research brief, the rubric its answer must cover, and the budget for it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    brief: str = Field(min_length=1)
    rubric: tuple[str, ...] = Field(min_length=1, description="points the answer must cover")
    budget: ResearchBudget

    def hash(self) -> str:
        """SHA-256 (hex) of the contract's canonical JSON: equal contracts, equal hashes."""
        return canonical_hash(self)

    def approve(self, *, by: str, at: datetime | None = None) -> ApprovedContract:
        """Approve this exact contract: the hash is recorded with who approved it and when."""
        return ApprovedContract(
            contract=self,
            contract_hash=self.hash(),
            approved_by=by,
            approved_at=at or datetime.now(UTC),
        )


class ApprovedContract(BaseModel):
    """A contract, the hash it was approved under, who approved it and when.

    The hash is checked whenever one is built or restored: a contract changed after
    its approval is refused, with the two hashes in the message.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    contract: Contract
    contract_hash: str = Field(pattern=r"^[0-9a-f]{64}$")
    approved_by: str = Field(min_length=1)
    approved_at: datetime

    @model_validator(mode="after")
    def _hash_matches(self) -> ApprovedContract:
        actual = self.contract.hash()
        if actual != self.contract_hash:
            raise ValueError(
                f"the contract's hash is {actual} but {self.contract_hash} was approved: "
                "the contract changed after approval. Approve the new contract."
            )
        return self
