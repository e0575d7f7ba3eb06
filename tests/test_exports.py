"""Pin the public API: it changes only on purpose (httpx's test_exported_members)."""

import relevance_memory


def test_all_is_sorted_and_importable() -> None:
    names = relevance_memory.__all__
    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions
    assert names == sorted(names, key=lambda n: (not n.isupper(), not n[:1].isupper(), n))
    assert len(set(names)) == len(names)
    for name in names:
        assert hasattr(relevance_memory, name), name


def test_core_names_are_exported() -> None:
    for name in [
        "RelevanceMemoryManager", "MemoryConfig", "BuiltContext", "DecisionRecord", "MessageDecision",
        "Message", "MessageType", "TaskGoal", "RelevanceScore", "ScoreSource", "Scorer", "OfflineScorer",
        "ScoreItem", "ScoringResult", "TokenCounter", "TiktokenCounter", "load_transcript", "check_context",
        "RelevanceMemoryError", "InvalidMessageError", "ContextOverflowError", "ConfigError", "CachePolicy",
    ]:
        assert name in relevance_memory.__all__


def test_every_error_derives_from_the_base() -> None:
    for name in relevance_memory.__all__:
        obj = getattr(relevance_memory, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, relevance_memory.RelevanceMemoryError)
