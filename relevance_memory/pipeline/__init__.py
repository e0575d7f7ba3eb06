"""The build pipeline (SPEC §3): one module per stage over one build state.

    partition → prefilter → score → pheromone → select → summarise → assemble → record

- :mod:`.partition` — pinned prompt, working memory and candidates; spends the budget on
  what is kept whatever the scores say (reply priming, pinned, goal block, working memory);
- :mod:`.prefilter` — forgetting and the BM25 prefilter: which candidates the scorer sees;
- :mod:`.score` — cache look-up, the scorer call (the only I/O), exactly one score per id;
- :mod:`.pheromone` — what the build tells the pheromone memory (observe, deposit);
- :mod:`.select` — tiers and the order that fills the budget (:mod:`.order`: named keys);
- :mod:`.summarise` — the summary reserve negotiated over the ledger, the summary pyramid;
- :mod:`.assemble` — the context in SPEC order, checked for API validity;
- :mod:`.record` — the decision record.

Around them, :mod:`.cycle` is the one call a build makes: append (:mod:`.append`: the previous
request plus the new messages, no stage runs), or compact / rebuild by running the stages.

Each stage is ``stage(state: BuildState, seams: Seams) -> Output``: it reads the slots of
earlier stages and the seams, and the runner (:func:`build`, :func:`abuild`) stores its
output in its own slot. :class:`~.ledger.BudgetLedger` accounts for every token.
"""

from ._run import abuild, build
from ._state import (
    Assembled,
    BuildState,
    BuiltContext,
    Chain,
    Partitioned,
    Prefiltered,
    Ranked,
    Scored,
    ScoreRequest,
    Seams,
    Selection,
    StoreView,
    Summarised,
)
from .ledger import BudgetLedger, LedgerEntry, Purpose
from .order import DEFAULT_ORDER, Order, OrderKey, OrderPolicy

__all__ = [
    "DEFAULT_ORDER",
    "Assembled",
    "BudgetLedger",
    "BuildState",
    "BuiltContext",
    "Chain",
    "LedgerEntry",
    "Order",
    "OrderKey",
    "OrderPolicy",
    "Partitioned",
    "Prefiltered",
    "Purpose",
    "Ranked",
    "ScoreRequest",
    "Scored",
    "Seams",
    "Selection",
    "StoreView",
    "Summarised",
    "abuild",
    "build",
]
