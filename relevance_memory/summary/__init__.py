"""The summary pyramid (SPEC §3 step 7, §7): what summarizers read and return, the offline
and LLM summarizers, value extraction."""
