"""Issue 13, honesty and ecosystem fit: token counts of other providers' shapes, unknown models,
one memory per LangGraph thread, optional extras that name themselves, typed package."""

from __future__ import annotations

import base64
import json
import struct
import sys
import warnings
import zlib
from pathlib import Path
from typing import Any

import pytest

from relevance_memory import (
    InvalidMessageError,
    MemoryConfig,
    MissingExtraError,
    RelevanceMemoryManager,
    check_anthropic_context,
    from_anthropic,
    to_anthropic,
)
from relevance_memory._config import encoding_is_exact, warn_once
from relevance_memory._extras import require
from relevance_memory._models import content_text
from relevance_memory._tokenizer import (
    IMAGE_TOKENS_LOW,
    TOOL_CALL_OVERHEAD,
    TiktokenCounter,
    image_tokens,
    tools_tokens,
)

COUNTER = TiktokenCounter()
BIG_TEXT = "The invoice INV-20931 totals 4,812.50 EUR and is due 2026-12-15. " * 40


def png(width: int, height: int) -> str:
    header = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    body = header + struct.pack(">I", zlib.crc32(header[12:])) + b"\x00" * 4000
    return base64.b64encode(body).decode()


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


# --------------------------------------------------------------------------- Anthropic-shaped parts
@pytest.mark.parametrize(
    ("part", "inner"),
    [
        ({"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG_TEXT}, BIG_TEXT),
        ({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": BIG_TEXT}]}, BIG_TEXT),
        ({"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "short"}]}, "short"),
        ({"type": "thinking", "thinking": BIG_TEXT, "signature": "c2lnbmF0dXJl" * 40}, BIG_TEXT),
        ({"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": BIG_TEXT}}, BIG_TEXT),
        ({"type": "search_result", "title": "Q3 report", "content": [{"type": "text", "text": BIG_TEXT}]}, "Q3 report" + BIG_TEXT),
    ],
)
def test_text_carrying_parts_are_counted_by_their_text_not_as_an_image(part: dict[str, Any], inner: str) -> None:
    got = COUNTER.count_message(user([part]))
    text_tokens = COUNTER.count_text(inner)
    framing = COUNTER.count_message(user(""))
    assert text_tokens + framing <= got <= text_tokens + framing + TOOL_CALL_OVERHEAD + 2
    assert BIG_TEXT[:40] in content_text([part]) or inner in content_text([part])


@pytest.mark.parametrize("arguments", [{"path": "src/app.py"}, {"query": BIG_TEXT}, {}])
def test_tool_use_parts_cost_like_a_tool_call(arguments: dict[str, Any]) -> None:
    part = {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": arguments}
    message = {"role": "assistant", "content": [part]}
    expected = (
        COUNTER.count_message({"role": "assistant", "content": ""})
        + TOOL_CALL_OVERHEAD + COUNTER.count_text("read_file") + COUNTER.count_text(json.dumps(arguments, ensure_ascii=False))
    )
    assert COUNTER.count_message(message) == expected
    assert content_text([part]).startswith("read_file(")


def test_images_inside_tool_results_and_anthropic_sources_use_the_image_rule() -> None:
    small = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(100, 100)}}
    big = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png(2048, 2048)}}
    assert image_tokens(small) == IMAGE_TOKENS_LOW + 170  # one tile
    assert image_tokens(big) == IMAGE_TOKENS_LOW + 170 * 4  # scaled to 768×768: 2×2 tiles
    nested = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "chart:"}, small]}
    assert COUNTER.count_message(user([nested])) == COUNTER.count_message(user([{"type": "text", "text": "chart:"}, small])) + TOOL_CALL_OVERHEAD


def test_unknown_parts_count_their_strings_and_payloads_at_a_bounded_cost() -> None:
    payload = base64.b64encode(b"\x00" * 300_000).decode()
    part = {"type": "x_custom_blob", "caption": "site plan", "data": payload}
    tokens = COUNTER.count_message(user([part]))
    assert tokens == COUNTER.count_message(user("")) + COUNTER.count_text("site plan") + 765
    assert content_text([part]) == "site plan"


def test_anthropic_shaped_history_is_refused_as_is_and_built_within_budget_once_converted() -> None:
    history = [
        user("Summarise the invoices; never include personal data."),
        {"role": "assistant", "content": [{"type": "text", "text": "Reading."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "inv.txt"}}]},
        user([{"type": "tool_result", "tool_use_id": "toolu_1", "content": BIG_TEXT}]),
        user("Thanks. Now the total?"),
    ]
    memory = RelevanceMemoryManager(max_input_tokens=600, keep_recent=1)
    with pytest.raises(InvalidMessageError, match="from_anthropic"):  # a tool_use kept, its result summarised: never
        memory.extend(history)
    memory.extend(from_anthropic(history))
    assert [m.role for m in memory.messages] == ["user", "assistant", "tool", "user"]
    assert memory.messages[2].token_count > COUNTER.count_text(BIG_TEXT)  # not a flat 765
    built = memory.build_context()
    assert built.record.tokens_after <= 600
    context = to_anthropic(built.messages)
    assert check_anthropic_context(context.messages, system=context.system) == []


# --------------------------------------------------------------------------- unknown models
@pytest.mark.parametrize(
    ("model", "exact", "window_known"),
    [("gpt-4o-mini", True, True), ("gpt-3.5-turbo", True, True), ("o3-mini", True, True),
     ("claude-3-5-sonnet", False, True), ("gemini-2.0-flash", False, True), ("llama-3.1-8b-instruct", False, False),
     ("my-org/qwen2.5-coder", False, False)],
)
def test_configs_say_what_they_only_guess(model: str, exact: bool, window_known: bool) -> None:
    config = MemoryConfig(model=model)
    kinds = [kind for kind, _ in config.approximations()]
    assert encoding_is_exact(model) is exact and config.token_counts_exact is exact
    assert ("tokens" in kinds) is (not exact)
    assert ("window" in kinds) is (not window_known)
    assert MemoryConfig(model=model, max_input_tokens=8000).approximations() == [
        a for a in config.approximations() if a[0] == "tokens"
    ]
    for _, sentence in config.approximations():
        assert model in sentence


def test_warn_once_warns_once_per_model_and_kind() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert warn_once("test-model-x", "tokens", "counts are approximate")
        assert not warn_once("test-model-x", "tokens", "counts are approximate")
        assert warn_once("test-model-x", "window", "window guessed")
    assert [str(w.message) for w in caught] == [
        "counts are approximate (shown once per model)", "window guessed (shown once per model)"
    ]


def test_tools_schema_tokens() -> None:
    tools = [{"type": "function", "function": {"name": "bash", "description": "run a command",
                                               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]
    assert tools_tokens(COUNTER, None) == 0 and tools_tokens(COUNTER, []) == 0
    assert tools_tokens(COUNTER, tools) == COUNTER.count_text(json.dumps(tools))
    assert tools_tokens(COUNTER, tools * 3) > 2 * tools_tokens(COUNTER, tools)


# --------------------------------------------------------------------------- LangGraph threads
def lc_conversation(tag: str, turns: int) -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage

    out: list[Any] = [HumanMessage(f"Thread {tag}: plan the trip; never book before 9am.")]
    for n in range(turns):
        out.append(AIMessage(f"{tag} answer {n} " + "detail " * 30))
        out.append(HumanMessage(f"{tag} question {n + 1}"))
    return out


@pytest.mark.parametrize("entry", ["call", "runnable", "ainvoke"])
async def test_interleaved_langgraph_threads_keep_their_own_memories(entry: str) -> None:
    pytest.importorskip("langchain_core")
    from relevance_memory.adapters.langchain import ManagedContextHook

    hook = ManagedContextHook(max_input_tokens=400, keep_recent=2)
    runnable = hook.as_runnable()
    histories = {"a": lc_conversation("a", 6), "b": lc_conversation("b", 9), "c": lc_conversation("c", 3)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a resync would warn: interleaving must never resync
        for step in range(1, 20, 2):
            for tag, history in histories.items():
                state = {"messages": history[: min(step, len(history))]}
                config = {"configurable": {"thread_id": tag}}
                if entry == "call":
                    out = hook(state, config)
                elif entry == "runnable":
                    out = runnable.invoke(state, config=config)
                else:
                    out = await hook.ainvoke(state, config)
                sent = " ".join(str(m.content) for m in out["llm_input_messages"])
                assert f"Thread {tag}:" in sent
                assert not any(f"Thread {other}:" in sent for other in histories if other != tag)
    assert sorted(hook.threads) == ["a", "b", "c"]
    for tag, history in histories.items():
        assert len(hook.memory_for(tag).messages) == len(history)
    assert hook.memory_for("c") is not hook.memory_for("a")


def test_thread_memories_are_bounded_and_an_evicted_thread_rebuilds_from_its_state() -> None:
    pytest.importorskip("langchain_core")
    from relevance_memory.adapters.langchain import ManagedContextHook

    template = RelevanceMemoryManager(max_input_tokens=2000)
    hook = ManagedContextHook(template, max_threads=2)
    for tag in ("a", "b", "c"):
        hook({"messages": lc_conversation(tag, 2)}, {"configurable": {"thread_id": tag}})
    assert hook.threads == ["b", "c"]
    with pytest.raises(KeyError, match="'a'"):
        hook.memory_for("a")
    hook({"messages": lc_conversation("a", 3)}, {"configurable": {"thread_id": "a"}})
    assert len(hook.memory_for("a").messages) == len(lc_conversation("a", 3))
    assert hook.memory_for("a").scorer is template.scorer  # thread memories are fresh() copies of the template
    assert hook.memory_for(None) is template  # calls without a thread id use the given memory
    hook(lc_conversation("z", 1))
    assert len(template.messages) == 3


# --------------------------------------------------------------------------- extras and packaging
def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "networkx", None)  # import of networkx now fails
    with pytest.raises(MissingExtraError, match=r"pip install 'relevance-memory\[graph\]'") as info:
        require("networkx", "the pheromone graph export")
    assert info.value.extra == "graph" and isinstance(info.value, ImportError)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(MissingExtraError, match=r"relmem heatmap needs matplotlib.*\[plot\]"):
        require("matplotlib.pyplot", "relmem heatmap")
    from relevance_memory import PheromoneField

    with pytest.raises(MissingExtraError, match=r"\[graph\]"):
        PheromoneField().graphml()


def test_package_is_marked_typed_and_heavy_plot_libraries_are_extras() -> None:
    root = Path(__file__).resolve().parents[2]
    assert (root / "relevance_memory" / "py.typed").is_file()
    text = (root / "pyproject.toml").read_text(encoding="utf-8")
    required = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    assert "matplotlib" not in required and "networkx" not in required
    assert 'plot = ["matplotlib' in text and 'graph = ["networkx' in text


def test_the_pheromone_field_exports_standard_json() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=3000)
    memory.extend([{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."},
                   *[{"role": "user", "content": f"note {i} about src/app_{i}.py"} for i in range(30)]])
    memory.build_context()

    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    data = json.loads(memory.pheromone.to_json(), parse_constant=refuse)
    assert data["config"]["half_life_steps"]["system"] is None  # never evaporates
