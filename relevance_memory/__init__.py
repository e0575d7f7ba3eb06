"""relevance-memory: build relevant, budgeted LLM context from an agent's full history.

Keep every message; before each LLM call, build the context from the last steps
verbatim, older messages scored 1–5 for relevance to the task goal, whole tool-call
chains, a token budget filled by score, and a decision record saying why.

    from relevance_memory import RelevanceMemoryManager

    memory = RelevanceMemoryManager(max_input_tokens=8000)
    memory.extend(history)          # OpenAI chat dicts
    built = memory.build_context()  # built.messages, built.record
"""

from typing import TYPE_CHECKING, Any

from ._cache_policy import CachePolicy
from ._config import MemoryConfig, PheromoneConfig
from ._exceptions import (
    BoardError,
    BoardUnavailableError,
    ConfigError,
    ContextOverflowError,
    HistoryDivergedError,
    InvalidMessageError,
    MissingExtraError,
    RelevanceMemoryError,
    ScopeError,
    ScorerError,
    ScorerRequestError,
    ScorerTransportError,
    ScorerValidationError,
    TokenizerError,
    TranscriptFormatError,
)
from ._io import Transcript, load_transcript, parse_transcript
from ._manager import BuiltContext, RelevanceMemoryManager
from ._markers import GOAL_BLOCK_MARKER, SUMMARY_MARKER
from ._models import Message, MessageType, RelevanceScore, ScoreSource, TaskGoal, ToolCall
from ._record import BoardReport, BudgetBreakdown, DecisionRecord, MessageDecision, SummaryRecord
from ._tokenizer import TiktokenCounter, TokenCounter, tools_tokens
from ._version import __version__
from .clients._anthropic import AsyncManagedAnthropic, ManagedAnthropic
from .clients._anthropic_messages import (
    AnthropicTokenCounter,
    anthropic_request_tokens,
    check_anthropic_context,
    from_anthropic,
    to_anthropic,
)
from .clients._manage import manage
from .clients._openai import AsyncManagedOpenAI, ManagedOpenAI
from .clients._session import message_to_dict
from .pheromone._field import PheromoneField
from .pipeline.assemble import check_context
from .pipeline.order import OrderPolicy
from .scoring._cache import DiskScoreCache
from .scoring._capabilities import AsyncScorer
from .scoring._embedding import Embedder, VectorIndex
from .scoring._scorer import (
    InMemoryScoreCache,
    OfflineScorer,
    ScoreCache,
    ScoreItem,
    Scorer,
    ScorerUsage,
    ScoringContext,
    ScoringResult,
)
from .store._restore import RESTORE_TOOL_NAME, RestoreHandler, restore_tool_definition
from .summary._summary import LLMSummarizer, OfflineSummarizer, Summarizer, SummaryDraft, SummaryItem

if TYPE_CHECKING:
    from .scoring._llm_scorer import LLMScorer, TransportPolicy

# Imported on first use: they pull in openai + instructor, which offline users never need.
_LAZY = {"LLMScorer": ".scoring._llm_scorer", "TransportPolicy": ".scoring._llm_scorer"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The public API, pinned by tests/test_exports.py. Also public: relevance_memory.testing
# (fakes for users' tests), relevance_memory.pipeline (the stages, for extensions) and
# relevance_memory.adapters (framework adapters).
__all__ = [
    "GOAL_BLOCK_MARKER",
    "RESTORE_TOOL_NAME",
    "SUMMARY_MARKER",
    "AnthropicTokenCounter",
    "AsyncManagedAnthropic",
    "AsyncManagedOpenAI",
    "AsyncScorer",
    "BoardError",
    "BoardReport",
    "BoardUnavailableError",
    "BudgetBreakdown",
    "BuiltContext",
    "CachePolicy",
    "ConfigError",
    "ContextOverflowError",
    "DecisionRecord",
    "DiskScoreCache",
    "Embedder",
    "HistoryDivergedError",
    "InMemoryScoreCache",
    "InvalidMessageError",
    "LLMScorer",
    "LLMSummarizer",
    "ManagedAnthropic",
    "ManagedOpenAI",
    "MemoryConfig",
    "Message",
    "MessageDecision",
    "MessageType",
    "MissingExtraError",
    "OfflineScorer",
    "OfflineSummarizer",
    "OrderPolicy",
    "PheromoneConfig",
    "PheromoneField",
    "RelevanceMemoryError",
    "RelevanceMemoryManager",
    "RelevanceScore",
    "RestoreHandler",
    "ScopeError",
    "ScoreCache",
    "ScoreItem",
    "ScoreSource",
    "Scorer",
    "ScorerError",
    "ScorerRequestError",
    "ScorerTransportError",
    "ScorerUsage",
    "ScorerValidationError",
    "ScoringContext",
    "ScoringResult",
    "Summarizer",
    "SummaryDraft",
    "SummaryItem",
    "SummaryRecord",
    "TaskGoal",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerError",
    "ToolCall",
    "Transcript",
    "TranscriptFormatError",
    "TransportPolicy",
    "VectorIndex",
    "__version__",
    "anthropic_request_tokens",
    "check_anthropic_context",
    "check_context",
    "from_anthropic",
    "load_transcript",
    "manage",
    "message_to_dict",
    "parse_transcript",
    "restore_tool_definition",
    "to_anthropic",
    "tools_tokens",
]
