"""Relevance scoring (SPEC §3 step 4, §4, §6): the Scorer seam, the offline and semantic
scorers, embeddings, score caches, and the LLM scorer with its prompts and steps."""
