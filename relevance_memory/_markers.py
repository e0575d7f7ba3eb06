"""Markers that open every message a build adds, so readers and tests can tell them from input."""

__all__ = ["ELIDED_MARKER", "EXCERPT_MARKER", "GOAL_BLOCK_MARKER", "SUBTASK_MARKER", "SUMMARY_MARKER"]

GOAL_BLOCK_MARKER = "[relevance-memory: task goal]"
"""First line of the goal block, so a reader (or a test) can tell it from user text."""

SUMMARY_MARKER = "[relevance-memory: summary"
"""Start of every summary message (SPEC §7: clearly marked), so readers and tests can tell it apart."""

SUBTASK_MARKER = "[relevance-memory: current subtask]"
"""First line of the subtask note shown at the very end of a context (``CachePolicy.subtask_at_end``)."""

EXCERPT_MARKER = "[relevance-memory: excerpt"
"""Start of a message sent as an excerpt (SPEC §11): the marker line names the message id to
restore and what was left out; the lines after it are the original's, unchanged."""

ELIDED_MARKER = "[relevance-memory: elided"
"""Start of a message whose content was replaced by one restorable line (SPEC §11 *elided*)."""
