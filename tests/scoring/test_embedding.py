"""Embedding seam (issue 11): determinism of vectors, exact cosines, the vector index,
the default model read from its wheel, and the lexical fallback without it."""

from __future__ import annotations

import copy
import hashlib
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory._models import TaskGoal
from relevance_memory.scoring import _embedding, _semantic
from relevance_memory.scoring._embedding import (
    Embedder,
    StaticEmbedder,
    VectorIndex,
    cosine_scores,
    default_embedder,
    embedder_unavailable_reason,
    quantize,
)
from relevance_memory.scoring._scorer import OfflineScorer, ScoreItem
from relevance_memory.scoring._semantic import SemanticFusion, SemanticScorer, semantic_ranks

TEXTS = [
    "I bought a portable power bank last week.",
    "Any tips for my phone's battery life?",
    "The weather in Lisbon is lovely today.",
    "def build_context(self, budget): ...",
    "我喜欢喝茶，不喝咖啡。",
    "",
]
FINGERPRINT = "28dde2c357832ca880dbf01a1743fb626edc4555e284f29113cef979aad8e25c"
"""sha256 of the int8 vectors of TEXTS under wordllama 0.4.0.post1 l2_supercat_256 (mean-l2-f64-v1)."""


def tiny_embedder() -> StaticEmbedder:
    """A 4-dimension static model over a word-level vocabulary (no package needed)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, "power": 1, "bank": 2, "battery": 3, "phone": 4, "weather": 5, "sunny": 6}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    table = np.array(
        [[0, 0, 0, 0.1], [1, 0.2, 0, 0], [0.9, 0.1, 0, 0], [0.8, 0.3, 0, 0], [0.5, 0.5, 0, 0], [0, 0, 1, 0],
         [0, 0.1, 0.9, 0]],
        dtype=np.float16,
    )
    return StaticEmbedder(table, tok, name="tiny", version="tiny-1")


# ----------------------------------------------------------------- the seam on a tiny model
def test_static_embedder_is_an_embedder_with_unit_rows() -> None:
    emb = tiny_embedder()
    assert isinstance(emb, Embedder)
    v = emb.embed(["power bank", "battery phone", "sunny weather", ""])
    assert v.shape == (4, 4) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v[:3], axis=1), 1.0, atol=1e-6)
    assert not v[3].any()  # no token → zero row
    # mean of the rows of "power" and "bank", normalised
    expected = np.array([1.9, 0.3, 0, 0]) / np.linalg.norm([1.9, 0.3, 0, 0])
    assert np.allclose(v[0], expected, atol=1e-3)


def test_vectors_do_not_depend_on_the_batch() -> None:
    emb = tiny_embedder()
    alone = emb.embed(["battery phone"])[0]
    batch = emb.embed(["sunny weather", "battery phone", "power bank bank"])[1]
    assert alone.tobytes() == batch.tobytes()


def test_long_texts_are_clipped_head_and_tail() -> None:
    emb = StaticEmbedder(tiny_embedder()._table, tiny_embedder()._tokenizer, name="t", version="v", max_chars=40)
    text = "power " * 20 + "sunny " * 200 + "weather"
    v = emb.embed([text])[0]
    assert v[0] > 0 and v[2] > 0  # head ("power") and tail ("weather") both count


def test_quantize_and_exact_cosines() -> None:
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(50, 256)).astype(np.float32)
    q = quantize(rows)
    assert q.dtype == np.int8 and np.abs(q).max() == 127
    cos = cosine_scores(q[0], q)
    assert cos[0] == pytest.approx(1.0)
    exact = rows @ rows[0] / (np.linalg.norm(rows, axis=1) * np.linalg.norm(rows[0]))
    assert np.abs(cos - exact).max() < 0.02  # int8 costs ~0.005 at 256 dimensions
    # exactness: the same bits in any row order (no summation-order effects)
    perm = rng.permutation(50)
    assert cosine_scores(q[0], q[perm]).tobytes() == cos[perm].tobytes()
    assert cosine_scores(q[0], np.zeros((3, 256), dtype=np.int8)).tolist() == [0.0, 0.0, 0.0]
    assert quantize(np.zeros((1, 4))).tolist() == [[0, 0, 0, 0]]


class Counting:
    """The tiny embedder, telling ``seen`` of every batch it embeds."""

    name, version, dim = "tiny", "tiny-1", 4

    def __init__(self, seen: Callable[[list[str]], None]) -> None:
        self.inner = tiny_embedder()
        self.seen = seen

    def embed(self, texts: list[str]) -> np.ndarray:
        self.seen(texts)
        return self.inner.embed(texts)


def test_vector_index_embeds_each_key_once_and_grows_in_chunks() -> None:
    calls: list[int] = []
    index = VectorIndex(Counting(lambda texts: calls.append(len(texts))), chunk_rows=2)
    assert index.add([("h1", "power bank"), ("h2", "battery phone"), ("h1", "power bank")]) == 2
    assert index.add([("h2", "battery phone"), ("h3", "sunny weather")]) == 1
    assert calls == [2, 1] and len(index) == 3 and "h3" in index
    assert index.nbytes == 2 * 2 * 4  # two chunks of two int8 rows
    sims = index.similarity(index.embed_query("battery"), ["h1", "h2", "h3"])
    assert sims[1] > sims[0] > sims[2]
    with pytest.raises(KeyError, match="h9"):
        index.vector("h9")
    with pytest.raises(KeyError, match="h9"):
        index.similarity(index.embed_query("battery"), ["h1", "h9"])


def test_similarity_scores_each_stored_row_once_and_gives_the_bits_of_a_row_copy() -> None:
    """Issue 24: the cosines gathered by row equal those of a ``(keys, dim)`` copy, bit for bit,
    with repeated keys, any order, a partly filled last chunk, and few keys of a large index."""
    index = VectorIndex(tiny_embedder(), chunk_rows=3)
    words = ["power bank", "battery phone", "sunny weather", "rain", "charger cable", "phone case", "bank loan"]
    index.add((f"h{n}", w) for n, w in enumerate(words))
    query = index.embed_query("battery charger")
    for keys in (["h6", "h0", "h0", "h3", "h1", "h6", "h2", "h5", "h4"], ["h4"], [], [f"h{n}" for n in range(7)] * 5):
        got = index.similarity(query, keys)
        want = cosine_scores(query, index.rows(keys))
        assert got.dtype == np.float64 and got.tobytes() == want.tobytes()


def test_vector_index_keys_of_one_text_share_its_row() -> None:
    """Issue 24: an agent's repeated call has a new call id, so a new content hash, and the same
    text: its key gets the text's row (embedded once), in one batch or later by ``share``."""
    calls: list[list[str]] = []
    index = VectorIndex(Counting(lambda texts: calls.append(list(texts))), chunk_rows=2)
    assert index.add([("h1", "power bank"), ("h2", "power bank"), ("h3", "sunny weather"), ("h1", "sunny")]) == 2
    assert calls == [["power bank", "sunny weather"]] and len(index) == 2
    alone = quantize(tiny_embedder().embed(["power bank", "sunny weather"]))
    assert index.vector("h2").tolist() == index.vector("h1").tolist() == alone[0].tolist()
    assert index.vector("h3").tolist() == alone[1].tolist()
    assert index.share("h4", "h3") and index.vector("h4").tolist() == alone[1].tolist()
    assert not index.share("h5", "h9") and "h5" not in index  # nothing stored under h9
    assert not index.share("h1", "h3") and index.vector("h1").tolist() == alone[0].tolist()  # h1 keeps its row
    assert len(index) == 2 and len(calls) == 1


# ----------------------------------------------------------------- the default model
@pytest.fixture(scope="module")
def wordllama() -> Embedder:
    emb = default_embedder()
    if emb is None:
        pytest.skip(embedder_unavailable_reason())
    return emb


def test_default_model_vectors_are_the_same_on_every_machine(wordllama: Embedder) -> None:
    assert wordllama.name == "wordllama-l2_supercat-256" and wordllama.dim == 256
    assert wordllama.version.startswith("wordllama-0.4.") and wordllama.version.endswith("mean-l2-f64-v1")
    q = quantize(wordllama.embed(TEXTS))
    assert hashlib.sha256(q.tobytes()).hexdigest() == FINGERPRINT
    cos = cosine_scores(q[1], q)
    assert [round(float(c), 6) for c in cos] == [0.180001, 1.0, -0.024979, -0.021821, -0.034609, 0.0]


def test_default_model_tokenises_word_pieces_as_the_tokenizer_does(wordllama: Embedder) -> None:
    """Issue 24: the default model's token ids come from memoised ``▁``-pieces, not a BPE pass
    over the whole text; they must be the tokenizer's own ids, special tokens and odd spacing
    included — and the vectors, summed per text over a batch, the same bits as one by one."""
    import json

    assert isinstance(wordllama, StaticEmbedder) and wordllama._specials == ("<unk>", "<s>", "</s>")
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
    texts = [str(m.get("content") or "") for m in json.loads(fixture.read_text(encoding="utf-8"))["messages"]]
    texts += ["", " ", "  a  b  ", "\n\n x\t", "▁▁literal▁marker", "<s> special </s> <unk>", "emoji 😀 日本語 テキスト",
              "x" * 300, *TEXTS]
    expected = [enc.ids for enc in wordllama._tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert [list(ids) for ids in wordllama._token_ids(texts)] == expected
    assert np.array_equal(wordllama.embed(texts), np.concatenate([wordllama.embed([t]) for t in texts]))
    assert tiny_embedder()._specials is None  # another tokenizer: encode_batch as before


def test_default_model_reads_meaning(wordllama: Embedder) -> None:
    """The issue's example: the battery question meets the power bank, not the weather."""
    q = quantize(wordllama.embed(TEXTS))
    cos = cosine_scores(q[1], q)
    assert cos[0] > cos[2] and cos[0] > cos[3]


def test_default_model_never_downloads(wordllama: Embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the embedder must not touch the network")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(_embedding, "_cached", {})
    assert default_embedder() is not None


def test_without_the_package_scoring_is_lexical_and_says_so_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_package_dir", lambda package: None)
    assert default_embedder() is None
    assert "wordllama" in embedder_unavailable_reason() and "lexical" in embedder_unavailable_reason()
    monkeypatch.setattr(_semantic, "_WARNED_PROCESS", [])  # whatever ran before in this process
    scorer = SemanticScorer()
    goal = TaskGoal(final="tips for my phone's battery life", source="explicit")
    items = [ScoreItem(id="a", role="user", msg_type="user_chat", source="user", text="I bought a power bank"),
             ScoreItem(id="b", role="user", msg_type="user_chat", source="user", text="phone battery drains fast")]
    with pytest.warns(RuntimeWarning, match="semantic relevance off: the 'wordllama' package is not installed"):
        first = scorer.score(goal, items)
    second = scorer.score(goal, items)  # once per process: no second warning (filterwarnings=error)
    assert SemanticScorer().score(goal, items).warnings == [_embedding.embedder_unavailable_reason()]
    lexical = OfflineScorer().score(goal, items)
    assert [s.model_dump() for s in first.scores] == [s.model_dump() for s in lexical.scores]
    assert len(first.warnings) == 1 and "lexical" in first.warnings[0]
    assert second.warnings == []
    assert scorer.model == "offline-v2"


def test_package_without_its_files_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_embedding, "_cached", {})
    monkeypatch.setattr(_embedding, "_package_dir", lambda package: tmp_path)
    assert default_embedder() is None
    assert "lacks" in embedder_unavailable_reason()


# ----------------------------------------------------------------- the semantic scorer
def test_semantic_scorer_lifts_a_meaning_match_and_says_which_signal_fired() -> None:
    emb = tiny_embedder()
    scorer = SemanticScorer(SemanticFusion(min_cosine=0.5), embedder=emb)
    goal = TaskGoal(final="battery", source="explicit")
    items = [ScoreItem(id=f"m{i}", role="user", msg_type="user_chat", source="user", text=t, content_hash=f"h{i}")
             for i, t in enumerate(["power bank", "sunny weather", "weather weather"])]
    lexical = {s.id: s for s in OfflineScorer().score(goal, items).scores}
    fused = {s.id: s for s in scorer.score(goal, items).scores}
    assert lexical["m0"].score == 1  # no shared word; the best cosine rank (top 1 %) earns +2, capped at 4
    assert fused["m0"].score == 4 and "semantic match 0.9" in fused["m0"].reason and "top 1%" in fused["m0"].reason
    assert fused["m1"].score == 1 and "semantic" not in fused["m1"].reason  # says so only when it fired
    assert scorer.model.startswith("offline-v2+tiny@tiny-1:score-")
    # deterministic and picklable (workers reload the default embedder)
    assert [s.model_dump() for s in scorer.score(goal, items).scores] == list(
        s.model_dump() for s in fused.values()
    )
    clone = pickle.loads(pickle.dumps(scorer))
    assert clone.fusion == scorer.fusion


def test_semantic_ranks_share_of_candidates() -> None:
    assert semantic_ranks([0.9, 0.1, 0.9, 0.5]) == [0.0, 3 / 50, 0.0, 2 / 50]
    assert semantic_ranks([float(i) for i in range(100)])[99] == 0.0


def _embed_one_by_one(emb: StaticEmbedder, text: str) -> np.ndarray:
    """The vector of one text as the module docstring defines it, step by step: the clipped
    text's token ids, each distinct id's row (float64) times its count, summed in ascending id
    order by one reduction, scaled to unit length in float64, then float32 (issue 24: the batch
    path keeps these bits)."""
    out = np.zeros((1, emb.dim), dtype=np.float32)
    ids = np.asarray(list(emb._token_ids([_embedding._clip(text, emb._max_chars)])[0]), dtype=np.int64)
    if ids.size == 0:
        return out[0]
    distinct, counts = np.unique(np.clip(ids, 0, emb._vocab - 1), return_counts=True)
    totals = np.add.reduce(emb._table[distinct] * counts.astype(np.float64)[:, None], axis=0)[None, :]
    norms = np.sqrt(np.add.reduce(totals * totals, axis=1))
    if norms[0] > 0.0:
        out[0] = (totals[0] / norms[0]).astype(np.float32)
    return out[0]


def wide_embedder() -> StaticEmbedder:
    """A float32 model of 60 words whose rows mix ±2**60 with small values: a float64 sum loses
    the small ones beside the large ones, so the order rows are added in shows in the vectors
    ((2**60 + 1) - 2**60 is 0, (2**60 - 2**60) + 1 is 1; the default model's fp16 rows sum
    exactly in any order)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[UNK]": 0, **{f"w{n}": n + 1 for n in range(60)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    rng = np.random.default_rng(37)
    table = rng.choice(np.array([2.0**60, -(2.0**60), 1.0, -1.0, 3.0, 0.5], dtype=np.float32), (61, 8))
    return StaticEmbedder(table, tok, name="wide", version="wide-1")


_WIDE = wide_embedder()
_WORDS = st.lists(st.sampled_from([f"w{n}" for n in range(60)] + ["power", "bank", "the", "12", " ", "\n"]),
                  max_size=300).map(" ".join)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=300), st.sampled_from(TEXTS), _WORDS), min_size=1, max_size=12))
def test_batch_vectors_are_the_bits_of_each_text_summed_alone(texts: list[str]) -> None:
    """Issue 24: embed() sums each text's rows in one scratch block; the vectors are the bits of
    the step-by-step definition, for the default model, a float16 word-level one and a float32
    one whose sums round."""
    for emb in (default_embedder(), tiny_embedder(), _WIDE):
        if not isinstance(emb, StaticEmbedder):
            continue
        expected = np.stack([_embed_one_by_one(emb, t) for t in texts])
        assert np.array_equal(emb.embed(texts), expected)
        assert emb.embed(texts).tobytes() == expected.tobytes()


def test_exact_sums_take_one_product_a_text_and_keep_the_bits() -> None:
    """Issue 24: a table of float16 values sums exactly in float64 (``_exact_ids``), so embed()
    takes one BLAS product a text; the default and the tiny model do, the wide one (sums that
    round) and a table with ``-0.0``, a non-finite or a non-float16 value do not. Each vector is
    the bits of the reduction path, taken when a text has more ids than the exact bound."""
    assert _embedding._exact_ids(tiny_embedder()._table) > 10_000
    assert _WIDE._exact_ids == 0
    assert _embedding._exact_ids(np.array([[1.0, -0.0]], dtype=np.float32)) == 0
    assert _embedding._exact_ids(np.array([[1.0, np.inf]], dtype=np.float16)) == 0
    assert _embedding._exact_ids(np.array([[1.0, 0.1]], dtype=np.float32)) == 0  # 0.1 is no float16
    assert _embedding._exact_ids(np.array([[8.0, 0.5]], dtype=np.float32)) == 2**26 - 1  # 8 × (2**26 - 1) < 2**29
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "django__django-15280.json"
    import json

    texts = [str(m.get("content") or "") for m in json.loads(fixture.read_text(encoding="utf-8"))["messages"]]
    texts += [*TEXTS, "power bank " * 50, "w3 w3 w5"]
    for emb in (default_embedder(), tiny_embedder()):
        if not isinstance(emb, StaticEmbedder):
            continue
        assert emb._exact_ids > 10_000
        fast = emb.embed(texts)
        reducing = copy.copy(emb)  # not the process's default embedder itself
        reducing._exact_ids = 0  # every batch takes the reduction
        slow = reducing.embed(texts)
        assert fast.tobytes() == slow.tobytes()
        assert fast.tobytes() == np.stack([_embed_one_by_one(emb, t) for t in texts]).tobytes()


_PIECES_TEXT = st.lists(
    st.one_of(st.sampled_from(["0", "7", "42", "1999", "٣", "１", "x", "px", "foo", "_", ".py", "(", "/", "-", "\n", "▁",
                               "ing", "the", "日本", "😀", "é"]),
              st.text(alphabet="0123456789 abc_.-", max_size=12)),
    max_size=30,
).map(lambda parts: "".join(parts))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(_PIECES_TEXT, st.lists(_PIECES_TEXT, max_size=6).map(" ".join),
                          st.lists(_PIECES_TEXT, max_size=6).map("  ".join)), min_size=1, max_size=8))
def test_numbered_pieces_cut_at_their_digits_are_the_tokenizers_ids(texts: list[str]) -> None:
    """Issue 24: the default model's tokenizer keeps every digit a token of its own, so a piece
    with a digit is read as its head, its digits and the runs between them (``_digit_cut_ids``),
    not by a BPE pass: the ids are the tokenizer's own, with cold memos and warm ones."""
    emb = default_embedder()
    if not isinstance(emb, StaticEmbedder):
        pytest.skip("no default model")
    assert emb._digits_alone
    fresh = copy.copy(emb)
    fresh._segments, fresh._numbered, fresh._between = {}, {}, {}
    expected = [enc.ids for enc in emb._tokenizer.encode_batch(texts, add_special_tokens=False)]
    assert [list(ids) for ids in fresh._token_ids(texts)] == expected
    fresh._numbered.clear()  # the numbered pieces again, from the warm memos of their parts
    assert [list(ids) for ids in fresh._token_ids(texts)] == expected


def test_digits_alone_reads_the_merges_and_the_unknown_rule() -> None:
    """A merge holding a digit (either format), or unknown characters fused without byte
    fallback, and the digit cut is off; a tokenizer without a configuration has none."""
    model = {"merges": [["▁", "t"], ["e", "r"]], "fuse_unk": True, "byte_fallback": True}
    assert _embedding._digits_alone({"model": model})
    assert not _embedding._digits_alone({"model": {**model, "merges": [*model["merges"], ["1", "0"]]}})
    assert not _embedding._digits_alone({"model": {**model, "merges": ["▁ t", "x 9"]}})
    assert not _embedding._digits_alone({"model": {**model, "byte_fallback": False}})
    assert not _embedding._digits_alone(None) and _embedding._tokenizer_config(object()) is None
