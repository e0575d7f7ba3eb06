"""Markers that open every message a build adds, so readers and tests can tell them from input."""

__all__ = ["GOAL_BLOCK_MARKER", "SUBTASK_MARKER", "SUMMARY_MARKER"]

GOAL_BLOCK_MARKER = "[relevance-memory: task goal]"
"""First line of the goal block, so a reader (or a test) can tell it from user text."""

SUMMARY_MARKER = "[relevance-memory: summary"
"""Start of every summary message (SPEC §7: clearly marked), so readers and tests can tell it apart."""

SUBTASK_MARKER = "[relevance-memory: current subtask]"
"""First line of the subtask note shown at the very end of a context (``CachePolicy.subtask_at_end``)."""
