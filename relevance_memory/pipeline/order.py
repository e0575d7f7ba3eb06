"""Tier order as named, composable order keys (SPEC §3 step 6: "by strength then recency").

Selection keeps candidate chains in an order: core chains first, then working chains, each
tier sorted by an :class:`Order` — a sequence of named :class:`OrderKey` s compared in turn,
like a tuple sort key. Keys compose with ``+``:

    from relevance_memory.pipeline.order import RECENCY, SCORE, STRENGTH_BAND, WEIGHT, OrderPolicy

    DEFAULT_ORDER.working          # strength band + weight + recency
    ablation = OrderPolicy(core=DEFAULT_ORDER.core, working=RECENCY)   # one-line policy swap
    RelevanceMemoryManager(order=ablation)

Every key sorts the chain that should be kept first *lowest*; all keys read a
:class:`ChainFacts`, the per-chain numbers selection computes once per build.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

__all__ = [
    "AGENT_CORE",
    "CURRENT_VIEW",
    "DEFAULT_ORDER",
    "EDIT_RECENCY",
    "FIRST",
    "RECENCY",
    "SCORE",
    "STRENGTH_BAND",
    "USER_CONSTRAINT",
    "USER_CORE",
    "WEIGHT",
    "ChainFacts",
    "Order",
    "OrderKey",
    "OrderPolicy",
]


@dataclass(frozen=True, slots=True)
class ChainFacts:
    """What order keys read about one candidate chain.

    Attributes:
        root: index of the chain's first message.
        last: index of its newest message (recency).
        score: the chain's score (max of its members', 1–5).
        weight: the scorer's finer match within that score (max over the members with it).
        strength: the chain's pheromone strength (max of its members'; 0 without the field).
        band: ``floor(memory / order_resolution)``, where memory is the strength earlier
            subtasks of this task deposited (:meth:`PheromoneField.memory_for`), in bands of
            one score-3 deposit. The base strength (the kind's initial strength,
            reinforcement, evaporation since arrival) is not banded: as a band it put weaker
            matches of a favoured kind ahead of better ones (issue 11, BENCHMARKS.md).
        priority: position among the roots tried before any other (the task statement
            first), or the number of such roots for every other chain.
        current_view: the chain holds the newest view of a file the agent edited (issue 11).
        edited_at: for such a chain, index of the newest message that edited one of its
            files (the later the edit, the sooner it is tried); -1 otherwise.
        constraint: the chain holds a user's own message scored as a hard constraint
            (:data:`~relevance_memory.pipeline.select.CONSTRAINT_SCORE`, SPEC §4: 5 "decides
            the task's success").
        user_core: the chain holds a user's own message scored at least ``core_score``
            (SPEC §7: such a message is never only in a summary).
    """

    root: int
    last: int
    score: int
    weight: float
    strength: float
    band: int
    priority: int
    current_view: bool = False
    edited_at: int = -1
    constraint: bool = False
    user_core: bool = False


@dataclass(frozen=True)
class OrderKey:
    """One named sort criterion: ``key(facts)`` is lower for the chain to keep first."""

    name: str
    key: Callable[[ChainFacts], float]

    def __add__(self, other: OrderKey | Order) -> Order:
        return Order((self,)) + other

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Order:
    """Order keys compared in turn (a lexicographic sort key)."""

    keys: tuple[OrderKey, ...]

    def __add__(self, other: OrderKey | Order) -> Order:
        return Order(self.keys + (other.keys if isinstance(other, Order) else (other,)))

    def __call__(self, facts: ChainFacts) -> tuple[float, ...]:
        return tuple(k.key(facts) for k in self.keys)

    def __repr__(self) -> str:
        return " + ".join(k.name for k in self.keys)


FIRST = OrderKey("first", lambda c: c.priority)
"""Roots the build names to try first (the task statement) before any other."""
SCORE = OrderKey("score", lambda c: -c.score)
"""Higher score first."""
STRENGTH_BAND = OrderKey("strength band", lambda c: -c.band)
"""Stronger pheromone band first: SPEC §5 memory of what earlier subtasks of the task found
relevant (0 for every chain on the first subtask of a goal, so the weight decides)."""
WEIGHT = OrderKey("weight", lambda c: -c.weight)
"""The scorer's better match within one score first."""
RECENCY = OrderKey("recency", lambda c: -c.last)
"""Newer first."""
USER_CONSTRAINT = OrderKey("user constraint", lambda c: 0 if c.constraint else 1)
"""A user's hard constraint (their own message scored 5) before any other chain but the task
statement: what decides the task's success (SPEC §4)."""
CURRENT_VIEW = OrderKey("newest view of an edited file", lambda c: 0 if c.current_view else 1)
"""The newest view of each file the agent edited before every other chain but the task
statement and the user's hard constraints (issue 11): the current state of the files under
repair is what an agent needs next, more than an older error output scored 5."""
USER_CORE = OrderKey("user's own core message", lambda c: 0 if c.user_core else 1)
"""A user's own message scored ≥ ``core_score`` before other core chains of any score (after
the task statement, hard constraints and newest views of edited files): SPEC §7 says it is
never only in a summary, and an LLM assistant's long answer scored 5 for restating the topic
must not push it out (LongMemEval S, cc5ded98: three 520–580-token answers scored 5 left the
user's two 45–62-token turns scored 4 in the summary at 2k)."""
EDIT_RECENCY = OrderKey("edit recency", lambda c: -c.edited_at)
"""Among the newest views of edited files, the file edited last first (the one being worked
on now); the same for every other chain."""


@dataclass(frozen=True)
class OrderPolicy:
    """How each tier is ordered when selection fills the budget.

    Attributes:
        core: order of core chains (always kept while they fit).
        working: order of working chains (fill what core left).
        spare: order of archived chains in the room core and working left beyond the
            summary reserve (``MemoryConfig.fill_from_archive``): score (a 2 before a 1),
            strength band, weight, recency.
        agent_core: order of core chains when the candidates are mostly an agent's tool
            traffic (:func:`~relevance_memory.pipeline.select.tool_traffic_share` ≥ 0.5), or
            ``None`` to use ``core`` there too. The score still decides which chains are core;
            among them an agent's next step uses the newest names most (issue 21).
    """

    core: Order | OrderKey
    working: Order | OrderKey
    spare: Order | OrderKey = field(default_factory=lambda: SCORE + STRENGTH_BAND + WEIGHT + RECENCY)
    agent_core: Order | OrderKey | None = None

    def for_agent(self, agentic: bool) -> OrderPolicy:
        """This policy, with ``core`` replaced by ``agent_core`` when ``agentic`` and one is set."""
        if not agentic or self.agent_core is None:
            return self
        return replace(self, core=self.agent_core, agent_core=None)

    def core_key(self, facts: ChainFacts) -> tuple[float, ...]:
        """Sort key of a core chain."""
        return _as_order(self.core)(facts)

    def working_key(self, facts: ChainFacts) -> tuple[float, ...]:
        """Sort key of a working chain."""
        return _as_order(self.working)(facts)

    def spare_key(self, facts: ChainFacts) -> tuple[float, ...]:
        """Sort key of an archived chain tried in the room left (``spare``)."""
        return _as_order(self.spare)(facts)


def _as_order(value: Order | OrderKey) -> Order:
    return value if isinstance(value, Order) else Order((value,))


AGENT_CORE = FIRST + USER_CONSTRAINT + USER_CORE + RECENCY
"""Core order of an agent's history (:attr:`OrderPolicy.agent_core`): the task statement, the
user's hard constraints, what a person said scored core, then the newest first. Chosen by
action support on the SWE runs (``benchmarks/agent_support.py``, BENCHMARKS.md, issue 21):
at 8k, 0.877 against 0.834 with the chat core order; putting the edited files' newest views
first (:data:`CURRENT_VIEW`) gave 0.830, the strength band changed nothing."""

DEFAULT_ORDER = OrderPolicy(
    core=FIRST + USER_CONSTRAINT + CURRENT_VIEW + EDIT_RECENCY + USER_CORE + SCORE + STRENGTH_BAND + WEIGHT + RECENCY,
    working=STRENGTH_BAND + WEIGHT + RECENCY,
    agent_core=AGENT_CORE,
)
"""SPEC §3 step 6: core by the task statement first, then the user's hard constraints, the
newest views of edited files (the file edited last first), then score, strength band, weight
and recency; working by strength band, weight, then recency; archived chains in the room
left by score, strength band, weight and recency (issue 5 added the weight,
issue 11 the edited files' newest views: BENCHMARKS.md, "Superseded tool results on the SWE
runs", measures the order). An agent's history orders its core chains by :data:`AGENT_CORE`:
the score decides what is core, recency which core chain goes first (issue 21)."""
