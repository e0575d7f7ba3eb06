"""Managed clients (one line around an SDK client): OpenAI and Anthropic, the Anthropic
message format, and the session that keeps a memory in sync with the caller's history."""
