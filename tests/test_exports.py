"""Pin the public API: it changes only on purpose (httpx's test_exported_members).

``relevance_memory.__all__`` is exactly the list below. Adding or removing a public name is
a decision: change the list here in the same commit, and say why in its message. The
other public modules (``relevance_memory.testing``, ``relevance_memory.pipeline``) are
pinned the same way.
"""

import relevance_memory
import relevance_memory.board
import relevance_memory.pipeline
import relevance_memory.testing

PUBLIC = [
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

TESTING = [
    "FakeScorer",
    "FixedScorer",
    "FunctionScorer",
    "ScorerCall",
    "ScriptExhaustedError",
    "ScriptedScorer",
    "assert_valid_context",
    "is_generated",
]

PIPELINE = [
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


BOARD = [
    "Add",
    "Advance",
    "AgentLink",
    "AgentMemory",
    "Archive",
    "BatchResult",
    "BoardCell",
    "BoardConfig",
    "BoardError",
    "BoardRetry",
    "BoardUnavailableError",
    "CellView",
    "CircuitBreaker",
    "Deposit",
    "Event",
    "Forget",
    "InMemoryBoard",
    "LogEntry",
    "MemoryBoard",
    "MirroredBoard",
    "MissingExtraError",
    "Op",
    "PublishRule",
    "RedisBoard",
    "Reinforce",
    "Repair",
    "Restore",
    "ScopeError",
    "Snapshot",
    "SqliteBoard",
    "Supersede",
    "Use",
    "check_access",
    "decode_cell",
    "encode_cell",
    "imported_message",
    "is_private",
    "log_entry",
    "private_scope",
    "task_key",
]
"""``relevance_memory.board`` (SqliteBoard and CircuitBreaker added by issues 22 and 23)."""


def test_all_is_exactly_the_public_api() -> None:
    assert relevance_memory.__all__ == PUBLIC


def test_testing_and_pipeline_modules_are_pinned_too() -> None:
    assert relevance_memory.testing.__all__ == TESTING
    assert relevance_memory.pipeline.__all__ == PIPELINE
    assert relevance_memory.board.__all__ == BOARD


def test_every_public_name_is_importable_and_documented() -> None:
    for module in (relevance_memory, relevance_memory.testing, relevance_memory.pipeline, relevance_memory.board):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj) and not isinstance(obj, str):
                assert (obj.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"


def test_all_is_sorted_as_ruff_keeps_it() -> None:
    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
    for names in (PUBLIC, TESTING, PIPELINE):
        assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
        assert len(set(names)) == len(names)


def test_every_error_derives_from_the_base() -> None:
    for module in (relevance_memory, relevance_memory.testing):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, Exception):
                assert issubclass(obj, relevance_memory.RelevanceMemoryError), name
