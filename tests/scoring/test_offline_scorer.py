"""Offline scorer rules changed in issue 5 (chat typing, stemming, when-cue, weight tie-break)."""

from __future__ import annotations

from relevance_memory import OfflineScorer, RelevanceMemoryManager, RelevanceScore, TaskGoal
from relevance_memory._text import asks_when, has_time_expression, stem
from relevance_memory.pipeline import Chain
from relevance_memory.pipeline.select import select_chains
from relevance_memory.scoring._scorer import ScoreItem

GOAL = TaskGoal(final="When did Ann go camping?", subtask="When did Ann go camping?", source="explicit")


def _item(i: str, text: str, role: str = "user", msg_type: str = "user_chat") -> ScoreItem:
    return ScoreItem(id=i, role=role, msg_type=msg_type, source=role, text=text)


def test_stem() -> None:
    assert [stem(w) for w in ["camping", "camp", "parties", "classes", "planned", "make", "making", "dogs"]] == [
        "camp", "camp", "party", "class", "plan", "mak", "mak", "dog",
    ]
    assert stem("这是") == "这是"
    assert stem("2023") == "2023"


def test_time_cues() -> None:
    assert asks_when("When did Ann go camping?")
    assert asks_when("你什么时候去的?")
    assert not asks_when("What did Ann buy?")
    assert has_time_expression("we went last weekend")
    assert has_time_expression("昨天去的")
    assert not has_time_expression("we went camping")


def test_user_chat_with_cue_is_not_a_hard_constraint() -> None:
    scorer = OfflineScorer()
    chat = scorer.score_one(GOAL, _item("a", "I always love pizza"))
    instruction = scorer.score_one(GOAL, _item("b", "You must always reply in French", msg_type="user_instruction"))
    assert chat.score == 1
    assert instruction.score == 5
    assert instruction.reason == "user states a hard constraint"


def test_store_still_types_constraints_as_instructions() -> None:
    memory = RelevanceMemoryManager(max_input_tokens=1000)
    memory.extend([{"role": "user", "content": "Fix the bug"}, {"role": "user", "content": "Never touch setup.py"}])
    assert memory.messages[1].msg_type.value == "user_instruction"


def test_stemmed_match_and_when_cue() -> None:
    scorer = OfflineScorer()
    hit = scorer.score_one(GOAL, _item("a", "Ann: we went camp out by the lake last weekend"))
    no_time = scorer.score_one(GOAL, _item("b", "Ann: camps are fun"))
    assert hit.score == 5
    assert "states a time the goal asks for" in hit.reason
    assert no_time.score == 4
    assert hit.weight > no_time.weight > 0


def test_deterministic() -> None:
    items = [_item("a", "Ann: camping trip last May"), _item("b", "Bob: I like tea", role="assistant",
                                                               msg_type="assistant_reasoning")]
    first = OfflineScorer().score(GOAL, items).scores
    assert first == OfflineScorer().score(GOAL, items).scores
    assert [s.score for s in first] == [5, 1]


def test_selection_breaks_score_ties_by_weight() -> None:
    chains = {0: Chain(0, (0,), 10), 1: Chain(1, (1,), 10), 2: Chain(2, (2,), 10)}
    scores = {
        0: RelevanceScore(id="m0", score=4, weight=0.9),
        1: RelevanceScore(id="m1", score=4, weight=0.4),
        2: RelevanceScore(id="m2", score=4, weight=0.5),
    }
    sel = select_chains(chains, scores, available=20, core_score=4, archive_score=2,
                        referenced_by={}, promote_after_references=2)
    assert sel.kept == {0, 2}  # the two best matches, not the two newest


def test_long_chat_message_must_match_densely() -> None:
    scorer = OfflineScorer()
    goal = TaskGoal(final="What breed is Biscuit?", subtask="What breed is Biscuit?", source="explicit")
    short = ScoreItem(id="s", role="user", msg_type="user_chat", source="user",
                      text="Biscuit is a beagle breed", token_count=8)
    long_reply = ScoreItem(id="l", role="assistant", msg_type="assistant_reasoning", source="assistant",
                           text="Biscuit is a beagle breed " + "and more filler " * 400, token_count=1800)
    long_tool = ScoreItem(id="t", role="tool", msg_type="tool_result", source="bash",
                          text="Biscuit is a beagle breed " + "and more filler " * 400, token_count=1800)
    s, lr, lt = (scorer.score_one(goal, x) for x in (short, long_reply, long_tool))
    assert s.score == 4
    assert s.weight == 1.0
    assert lr.score == 3  # coverage 1.0 scaled by sqrt(200/1800) = 1/3 → weak match only
    assert lr.weight == round(1 / 3, 4)
    assert lt.score == 4  # tool results keep the unscaled thresholds


def test_referenced_chat_needs_a_goal_match() -> None:
    scorer = OfflineScorer()
    unrelated = ScoreItem(id="a", role="user", msg_type="user_chat", source="user",
                          text="Bob: see you at 10:30", referenced_by=2)
    related = ScoreItem(id="b", role="user", msg_type="user_chat", source="user",
                        text="Ann: the camping trip starts at 10:30", referenced_by=2)
    tool = ScoreItem(id="c", role="tool", msg_type="tool_result", source="bash",
                     text="ok: wrote config.yaml", referenced_by=2)
    assert scorer.score_one(GOAL, unrelated).score == 1
    assert "referenced by 2" in scorer.score_one(GOAL, related).reason
    assert scorer.score_one(GOAL, tool).score == 3  # tool results keep the reference bonus


def test_reason_articles_read_as_english() -> None:
    goal = TaskGoal(final="book a flight to Paris", source="explicit")
    items = [
        ScoreItem(id="u", role="user", msg_type="user_chat", source="user", text="hello there"),
        ScoreItem(id="i", role="user", msg_type="user_instruction", source="user", text="and one more thing"),
        ScoreItem(id="a", role="assistant", msg_type="assistant_reasoning", source="assistant", text="thinking"),
        ScoreItem(id="t", role="tool", msg_type="tool_result", source="bash", text="ok"),
    ]
    reasons = {s.id: s.reason.split(";")[0] for s in OfflineScorer().score(goal, items).scores}
    # before: "base 2 for an user chat", "an user instruction"
    assert reasons == {
        "u": "base 2 for a user chat", "i": "base 4 for a user instruction",
        "a": "base 2 for an assistant reasoning", "t": "base 2 for a tool result",
    }
