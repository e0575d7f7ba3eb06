"""Several agents, one board (SPEC §10): managers that belong to an agent, publish by rule,
read the shared scope, reinforce each other's items within the share caps, keep their
private messages private, resume after a restart, and keep building when Redis is down."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from invariants import assert_invariants

from relevance_memory import RelevanceMemoryManager
from relevance_memory.board import Advance, BoardRetry, CircuitBreaker, InMemoryBoard, RedisBoard, ScopeError

from .board_support import RedisServer, Ticker

pytestmark = pytest.mark.block_network(allowed_hosts=["127.0.0.1"])

TASK = "Fix the failing date parser in src/dates.py; never change tests/test_dates.py."


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def _agent(name: str, board: Any, clock: Clock, **kw: Any) -> RelevanceMemoryManager:
    return RelevanceMemoryManager(agent=name, board=board, clock=clock, max_input_tokens=4000, keep_recent=2, **kw)


def _call(n: int, command: str) -> dict[str, Any]:
    return {"role": "assistant", "content": f"Step {n}: run it.",
            "tool_calls": [{"id": f"c{n}", "type": "function",
                            "function": {"name": "bash", "arguments": f'{{"command": "{command}"}}'}}]}


def _team(board: Any) -> tuple[RelevanceMemoryManager, RelevanceMemoryManager, RelevanceMemoryManager]:
    clock = Clock()
    planner, coder, reviewer = (_agent(n, board, clock) for n in ("planner", "coder", "reviewer"))
    planner.add({"role": "system", "content": "You plan."})
    planner.add({"role": "user", "content": TASK})
    planner.add({"role": "assistant", "content": "Private hunch: the bug is in parse_iso_week."})
    coder.add({"role": "system", "content": "You write code."})
    coder.sync()
    coder.add(_call(1, "python -m pytest tests/test_dates.py -q"))
    coder.add({"role": "tool", "tool_call_id": "c1", "name": "bash",
               "content": "FAILED tests/test_dates.py::test_week_53 - ValueError: week 53 out of range in parse_iso_week"})
    coder.add({"role": "assistant", "content": "Private note: maybe the calendar module."})
    reviewer.add({"role": "system", "content": "You review."})
    return planner, coder, reviewer


def test_agents_publish_by_rule_and_read_the_shared_scope() -> None:
    board = InMemoryBoard("team")
    planner, coder, reviewer = _team(board)
    assert [m.id for m in planner.messages] == ["planner:m0", "planner:m1", "planner:m2"]
    assert [m.scope for m in planner.messages] == ["private:planner", "shared", "private:planner"]
    assert [m.scope for m in coder.messages][-3:] == ["private:coder", "shared", "private:coder"]
    reviewer.add({"role": "user", "content": "Review the fix for week 53 in parse_iso_week."})
    built = reviewer.build_context()
    imported = [m for m in reviewer.messages if m.producer != "reviewer"]
    assert [(m.id, m.producer, m.scope, m.msg_type.value) for m in imported] == [
        ("planner:m1", "planner", "shared", "user_instruction"),
        ("coder:m3", "coder", "shared", "tool_result"),
    ]
    assert imported[1].role == "user" and imported[1].name == "coder"
    assert imported[1].content.startswith('[coder · tool result of bash({"command": "python -m pytest')
    texts = " ".join(str(m.get("content")) for m in built.messages)
    assert "ValueError: week 53" in texts and TASK in texts
    for agent in (planner, coder, reviewer):  # SPEC §9 on every agent's build, imported messages included
        got = agent.build_context(budget=600)
        assert_invariants([m.to_openai() for m in agent.messages], got, 600, agent.tokenizer)
    report = built.record.board
    assert report is not None and report.agent == "reviewer" and report.source == "memory" and report.imported == 2
    item = report.items["coder:m3"]
    assert (item["producer"], item["scope"], item["first_selected"]) == ("coder", "shared", ["reviewer", 1])
    assert built.record.decision_for("coder:m3").producer == "coder"
    assert built.record.decision_for("coder:m3").scope == "shared"


def test_an_agent_never_sees_another_agents_private_messages() -> None:
    board = InMemoryBoard("team")
    planner, coder, reviewer = _team(board)
    for agent in (planner, coder, reviewer):
        agent.sync()
        agent.build_context()
    for agent, others in ((reviewer, ("planner", "coder")), (coder, ("planner",)), (planner, ("coder",))):
        text = " ".join(m.text for m in agent.messages)
        assert "Private hunch" not in text or agent is planner
        assert "Private note" not in text or agent is coder
        for other in others:
            with pytest.raises(ScopeError):
                board.read(f"private:{other}", agent=agent.agent or "")
            with pytest.raises(ScopeError):
                board.snapshot(f"private:{other}", None, agent=agent.agent or "")


def test_one_agents_use_raises_a_shared_item_for_all_within_the_share_cap() -> None:
    board = InMemoryBoard("team")
    _planner, coder, reviewer = _team(board)
    before = coder.pheromone.strength("coder:m3")
    reviewer.sync()
    reviewer.add({"role": "user", "content": "That ValueError: week 53 out of range comes from parse_iso_week."})
    reviewer.build_context()
    cell = board.snapshot("shared", ["coder:m3"], agent="coder").cells["coder:m3"].cell
    assert cell.reinforcements >= 1 and cell.contributions.get("reviewer", 0.0) > 0
    coder.build_context()  # reads the board again
    assert coder.pheromone.strength("coder:m3") > before
    cap = board.config.share_cap("shared")
    assert cap is not None and all(v <= cap + 1e-9 for v in cell.contributions.values())


def test_forget_is_refused_while_another_agent_uses_the_item() -> None:
    board = InMemoryBoard("team")
    _planner, coder, reviewer = _team(board)
    reviewer.sync()
    reviewer.add({"role": "user", "content": "Check week 53."})
    built = reviewer.build_context()
    assert built.record.decision_for("coder:m3").decision in ("kept", "recent")
    assert coder.forget("coder:m3") == "in_use:reviewer"
    assert reviewer.forget("coder:m3", archive=True) == "archived"  # its own use does not block it


def test_a_restarted_agent_resumes_with_its_messages_and_strengths() -> None:
    board = InMemoryBoard("team")
    _planner, coder, _reviewer = _team(board)
    coder.set_goal(subtask="fix parse_iso_week")
    coder.add({"role": "user", "content": "Go on with week 53."})
    coder.build_context()
    strengths = {m.id: coder.pheromone.strength(m.id) for m in coder.messages}
    again = _agent("coder", board, Clock())
    assert [(m.id, m.text, m.scope) for m in again.messages] == [(m.id, m.text, m.scope) for m in coder.messages]
    again.set_goal(subtask="fix parse_iso_week")
    again.build_context()
    for mid, s in strengths.items():
        assert again.pheromone.strength(mid) == pytest.approx(s, rel=1e-9), mid
    assert again.sync() == 0  # it resumes reading the shared log where it stopped


def test_fresh_keeps_the_agent_and_its_board_memory() -> None:
    board = InMemoryBoard("team")
    _planner, coder, _reviewer = _team(board)
    coder.build_context()
    other = coder.fresh([m.to_openai() for m in coder.messages if m.producer == "coder"])
    assert other.agent == "coder" and other.pheromone.board is coder.pheromone.board  # type: ignore[attr-defined]
    other.build_context()
    log = board.read("shared", agent="coder")
    assert [e.fields["id"] for e in log].count("coder:m3") == 1  # nothing published twice


def test_the_build_completes_when_redis_is_down_and_says_so(own_redis: RedisServer) -> None:
    name, ticker = f"team-{uuid.uuid4().hex[:6]}", Ticker()

    def board() -> RedisBoard:
        return RedisBoard.from_url(own_redis.url, name, retry=BoardRetry(attempts=2, first_wait_s=0.01,
                                                                         max_wait_s=0.02, max_total_s=1.0),
                                   socket_timeout=0.3, socket_connect_timeout=0.3, breaker=CircuitBreaker(clock=ticker))

    _planner, _coder, reviewer = _team(board())
    reviewer.sync()
    own_redis.stop()
    reviewer.add({"role": "user", "content": "Is week 53 handled in parse_iso_week?"})
    built = reviewer.build_context()
    assert built.messages[-1]["content"] == "Is week 53 handled in parse_iso_week?"
    report = built.record.board
    assert report is not None and report.source == "local copy"
    assert any("unreachable" in f for f in report.faults)
    assert any("memory board" in w for w in built.record.warnings)
    assert len(reviewer.messages) == 4  # nothing in the local store is lost
    own_redis.start()
    ticker.advance(1.0)  # the circuit breaker's back-off is over
    built = reviewer.build_context()
    assert built.record.board is not None and built.record.board.source == "redis"
    assert built.record.board.items["coder:m3"]["users"].get("reviewer") is not None  # the queued use arrived


def test_explicit_publish_and_an_archived_item_leaves_the_others_contexts() -> None:
    board = InMemoryBoard("team")
    planner, coder, reviewer = _team(board)
    note = planner.add({"role": "assistant", "content": "Decision: keep the ISO calendar, patch parse_iso_week."},
                       scope="shared")
    assert note.scope == "shared" and note.producer == "planner"
    reviewer.add({"role": "user", "content": "What did the planner decide about parse_iso_week?"})
    built = reviewer.build_context()
    assert built.record.decision_for(note.id).decision in ("kept", "recent")
    assert planner.forget(note.id, archive=True) == "in_use:reviewer"  # the reviewer just used it
    board.apply([Advance("shared", "planner", to=board.tick("shared") + board.config.lease_ticks + 1)])
    assert planner.forget(note.id, archive=True) == "archived"
    coder.add({"role": "user", "content": "Go on."})
    built = coder.build_context()
    decision = built.record.decision_for(note.id)
    assert decision.decision not in ("kept", "recent") or decision.tier == "recent"  # archived: not carried
    assert coder.pheromone.forgotten_for(note.id, coder.goal.final, coder.goal.effective_subtask)


def test_relmem_explain_shows_where_the_shared_items_came_from(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from relevance_memory.cli import app

    board = InMemoryBoard("team")
    _planner, _coder, reviewer = _team(board)
    reviewer.add({"role": "user", "content": "Review week 53."})
    path = tmp_path / "record.json"
    path.write_text(reviewer.build_context().record.to_json())
    got = CliRunner().invoke(app, ["explain", str(path)], env={"COLUMNS": "200"})
    assert got.exit_code == 0, got.output
    assert "board 'team', agent 'reviewer': shared strengths from memory, 2 message(s) of other agents imported" in got.output
    assert "coder:m3: by coder (shared, active)" in got.output and "first selected: reviewer build 1" in got.output


def test_a_callers_id_the_board_refuses_loses_only_its_own_operations() -> None:
    """A caller's id with a tab is refused by every board (check_ops); the agent's batch that
    held it used to be dropped whole, so the build's use of the tool result published beside
    it ("coder:m2": lease, first_selected) never reached the board. Now only the refused id's operations are lost, each
    recorded as a fault, and the build keeps every message."""
    board, clock = InMemoryBoard("tabs"), Clock()
    coder = _agent("coder", board, clock)
    coder.add({"role": "user", "content": TASK}, id="u\t1")
    coder.add(_call(1, "pytest -q"))
    coder.add({"role": "tool", "tool_call_id": "c1", "content": "FAILED tests/test_dates.py::test_iso - ValueError"})
    built = coder.build_context()
    assert len(built.messages) == 3
    cells = board.snapshot("shared", None, agent="planner").cells
    assert sorted(cells) == ["coder:m2"]
    assert (cells["coder:m2"].cell.users, cells["coder:m2"].cell.first_selected) == ({"coder": 0}, ("coder", 1))
    faults = built.record.board.faults
    assert faults and all("'u\\t1'" in f for f in faults)
    assert all(f.startswith("board 'tabs': 1 operation(s) not applied") for f in faults if "not applied" in f)
