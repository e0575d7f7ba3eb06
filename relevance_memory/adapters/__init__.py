"""Framework adapters (optional extras; nothing here is imported by ``relevance_memory``).

- :mod:`relevance_memory.adapters.langchain` — LangChain v1 / LangGraph:
  ``RelevanceMemoryMiddleware`` for ``create_agent`` (every model call of the agent loop
  gets the managed context), and the legacy ``ManagedContextHook`` for LangGraph's
  ``create_react_agent(pre_model_hook=…)`` and plain chains
  (``pip install 'relevance-memory[langchain]'``).
- :mod:`relevance_memory.adapters.openai_agents` — OpenAI Agents SDK: a ``Session`` whose
  history is the managed context, and a ``call_model_input_filter`` that manages every
  model call of a run, tool loop included (``pip install 'relevance-memory[agents]'``).

Each module imports its framework lazily and raises an ``ImportError`` naming the extra
when it is missing.
"""
