"""OpenTelemetry spans of a managed agent loop, printed from an in-memory exporter (no network).

The managed OpenAI client replays a recorded SWE-bench run against a scripted endpoint (an
``httpx`` mock transport, as in ``examples/replay_agent.py``). With ``opentelemetry-sdk``
installed, each model call leaves two spans — the build (``search_memory``, with the build's
mode, tokens before / after and prefix tokens) and the model call after it (``chat gpt-4o``,
with ``gen_ai.conversation.compacted`` and the provider's usage, cached tokens included) —
and each warning of a decision record is a log record on the ``relevance_memory`` logger::

    from opentelemetry import trace
    trace.set_tracer_provider(provider)          # your SDK provider and exporter
    client = manage(openai.OpenAI(), max_input_tokens=8000)

    python examples/otel_trace.py --steps 30
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from replay_agent import DEFAULT_TRANSCRIPT, scripted_client, steps_of

from relevance_memory import load_transcript, manage


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("transcript", nargs="?", type=Path, default=DEFAULT_TRANSCRIPT)
    parser.add_argument("--budget", type=int, default=8000, help="token budget of each request (tokens)")
    parser.add_argument("--steps", type=int, default=30, help="model calls to replay")
    args = parser.parse_args(argv)

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    logging.basicConfig(level=logging.WARNING, format="  log %(levelname)s %(name)s: %(message)s", stream=sys.stdout)

    opening, steps = steps_of(load_transcript(args.transcript).messages)
    steps = steps[: args.steps]
    base, _ = scripted_client([reply for reply, _ in steps])
    client = manage(base, max_input_tokens=args.budget)
    history = list(opening)
    for recorded, after in steps:
        client.chat.completions.create(model="gpt-4o", messages=history)
        history += [recorded, *after]

    print(f"{'span':<16} {'mode':<13} {'tokens before':>13} {'after':>6} {'prefix':>6} {'compacted':>9} "
          f"{'input':>6} {'cache read':>10}")
    for span in exporter.get_finished_spans():
        a = dict(span.attributes or {})
        if span.name == "search_memory":
            print(f"{span.name:<16} {a['relevance_memory.build.mode']:<13} {a['relevance_memory.tokens.before']:>13} "
                  f"{a['relevance_memory.tokens.after']:>6} {a['relevance_memory.prefix.tokens']:>6} "
                  f"{a.get('gen_ai.conversation.compacted', '')!s:>9}")
        elif span.name.startswith("chat"):
            print(f"{span.name:<16} {'':<13} {'':>13} {'':>6} {'':>6} {a.get('gen_ai.conversation.compacted', '')!s:>9} "
                  f"{a.get('gen_ai.usage.input_tokens', ''):>6} {a.get('gen_ai.usage.cache_read.input_tokens', ''):>10}")
    spans = exporter.get_finished_spans()
    print(f"TOTAL spans={len(spans)} builds={sum(s.name == 'search_memory' for s in spans)} "
          f"model_calls={sum(s.name.startswith('chat') for s in spans)} "
          f"compacted_calls={sum(s.name.startswith('chat') and 'gen_ai.conversation.compacted' in (s.attributes or {}) for s in spans)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
