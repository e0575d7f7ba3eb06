"""Framework adapters (optional extras; nothing here is imported by ``relevance_memory``).

- :mod:`relevance_memory.adapters.langchain` — LangChain / LangGraph: a hook that turns a
  list of LangChain messages into the managed context (``pip install 'relevance-memory[langchain]'``).
- :mod:`relevance_memory.adapters.openai_agents` — a ``Session`` for the OpenAI Agents SDK
  whose history is the managed context (``pip install 'relevance-memory[agents]'``).

Each module imports its framework lazily and raises an ``ImportError`` naming the extra
when it is missing.
"""
