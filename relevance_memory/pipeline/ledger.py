"""The budget ledger: every token of a build's budget, spent or reserved, with its purpose.

A build's budget (``max_input_tokens``, SPEC §3) is spent in this order: the tokens that
prime the reply, the pinned system prompt(s), the goal block, working memory (the last
steps), then the candidates that selection keeps (``core``, then ``working``), and the
summaries of the archive. The ledger is an immutable value: each stage takes the ledger
of the stage before it and returns a new one with its own lines added, so the decision
record can say where every token went (``DecisionRecord.budget_breakdown``) and ``left`` is always
what the next stage may spend.

    ledger = BudgetLedger(8000).spend(Purpose.REPLY_PRIMING, 3).spend(Purpose.PINNED, 412)
    ledger.left            # 7585 tokens
    ledger.fits(900)       # True

Lines are ``spend`` (tokens that go into the context), ``release`` (tokens spent earlier
that a later stage gives back, e.g. a goal block that yields to a summary) and ``reserve``
(tokens held back for a later purpose while a stage fills the rest: the task statement's
room while working memory is filled, the summary reserve while selection fills the
candidates). Reserves are accounting notes: they never change ``left``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Literal

from .._record import BudgetBreakdown, BudgetLine

__all__ = ["BudgetLedger", "LedgerEntry", "Purpose"]


class Purpose(str, Enum):
    """What tokens of the budget are for (in the order a build spends them)."""

    REPLY_PRIMING = "reply_priming"
    PINNED = "pinned"
    GOAL_BLOCK = "goal_block"
    WORKING_MEMORY = "working_memory"
    TASK_STATEMENT = "task_statement"  # reserved only: room kept for it while working memory fills
    CORE = "core"
    WORKING = "working"
    SUMMARIES = "summaries"
    SUBTASK = "subtask"  # the subtask note at the end of the context (CachePolicy.subtask_at_end)
    APPENDED = "appended"  # messages appended verbatim since the last compaction (SPEC §3.1)


SPENDING_ORDER = (
    Purpose.REPLY_PRIMING,
    Purpose.PINNED,
    Purpose.GOAL_BLOCK,
    Purpose.WORKING_MEMORY,
    Purpose.CORE,
    Purpose.WORKING,
    Purpose.SUMMARIES,
    Purpose.APPENDED,
    Purpose.SUBTASK,
)
"""The purposes that can spend tokens, in the order the breakdown lists them."""

Kind = Literal["spend", "release", "reserve"]


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One line of the ledger.

    Attributes:
        purpose: what the tokens are for.
        tokens: how many (tokens, ≥ 0).
        kind: ``spend``, ``release`` (gives back tokens spent earlier) or ``reserve`` (a note).
        note: why, in words (shown by ``relmem explain``).
    """

    purpose: Purpose
    tokens: int
    kind: Kind
    note: str = ""


@dataclass(frozen=True, slots=True)
class BudgetLedger:
    """An immutable account of one build's budget (module doc).

    Args:
        budget: the build's token budget (tokens, > 0).
        entries: the lines so far, oldest first.
    """

    budget: int
    entries: tuple[LedgerEntry, ...] = ()

    def _add(self, purpose: Purpose, tokens: int, kind: Kind, note: str) -> BudgetLedger:
        if tokens < 0:
            raise ValueError(f"a ledger line takes a non-negative number of tokens, got {tokens} for {purpose.value}")
        return BudgetLedger(self.budget, (*self.entries, LedgerEntry(purpose, tokens, kind, note)))

    def spend(self, purpose: Purpose, tokens: int, note: str = "") -> BudgetLedger:
        """A new ledger with ``tokens`` spent on ``purpose``. Raises ``ValueError`` if ``tokens < 0``."""
        return self._add(purpose, tokens, "spend", note)

    def release(self, purpose: Purpose, tokens: int, note: str = "") -> BudgetLedger:
        """A new ledger giving back ``tokens`` spent on ``purpose`` earlier.

        Raises:
            ValueError: more is released than ``purpose`` holds.
        """
        if tokens > self.spent_on(purpose):
            raise ValueError(f"cannot release {tokens} tokens of {purpose.value}: it holds {self.spent_on(purpose)}")
        return self._add(purpose, tokens, "release", note)

    def reserve(self, purpose: Purpose, tokens: int, note: str = "") -> BudgetLedger:
        """A new ledger noting ``tokens`` held back for ``purpose`` (``left`` is unchanged)."""
        return self._add(purpose, tokens, "reserve", note)

    def spent_on(self, purpose: Purpose) -> int:
        """Tokens spent on ``purpose``, net of releases (tokens)."""
        total = 0
        for entry in self.entries:
            if entry.purpose is purpose and entry.kind != "reserve":
                total += entry.tokens if entry.kind == "spend" else -entry.tokens
        return total

    def reserved_for(self, purpose: Purpose) -> int:
        """The latest reserve noted for ``purpose`` (tokens; 0 when none)."""
        for entry in reversed(self.entries):
            if entry.purpose is purpose and entry.kind == "reserve":
                return entry.tokens
        return 0

    @property
    def spent(self) -> int:
        """Tokens spent on every purpose, net of releases (tokens)."""
        return sum(self.spent_on(p) for p in SPENDING_ORDER)

    @property
    def left(self) -> int:
        """Tokens of the budget not spent yet (tokens; negative only if a stage overspent)."""
        return self.budget - self.spent

    def fits(self, tokens: int, *, keep: int = 0) -> bool:
        """Whether ``tokens`` more can be spent while ``keep`` tokens stay free."""
        return self.spent + tokens + keep <= self.budget

    def breakdown(self) -> BudgetBreakdown:
        """The record's view: tokens per purpose, what is left, and every line with its note."""
        return BudgetBreakdown(
            budget=self.budget,
            spent={p.value: self.spent_on(p) for p in SPENDING_ORDER},
            unused=self.left,
            lines=[BudgetLine(purpose=e.purpose.value, tokens=e.tokens, kind=e.kind, note=e.note) for e in self.entries],
        )
