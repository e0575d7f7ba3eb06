"""Reciprocal-rank fusion read with fewer sorts (issue 24): the same floats as ranking every
message by both scores, and a cosine order grown as messages arrive equal to sorting them all."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from relevance_memory.pipeline._bm25 import PrefilterIndex
from relevance_memory.scoring._semantic import RRF_K, grown_rank_order, rank_order, rrf_fuse, rrf_fuse_array

VALUES = st.lists(st.sampled_from([0.0, -0.0, 0.25, 0.5, 1.0, 2.5, -1.0, 1e-300]), max_size=60)


def fused_by_two_full_sorts(lexical: list[float], semantic: list[float], k: int = RRF_K) -> list[float]:
    """The fusion as it was first written: every message ranked by each score (ties: newer first)."""
    n = len(lexical)
    position = np.arange(n)

    def ranks(values: np.ndarray) -> np.ndarray:
        out = np.empty(n, dtype=np.int64)
        out[np.lexsort((-position, -values))] = np.arange(1, n + 1)
        return out

    lex_values = np.asarray(lexical, dtype=np.float64)
    lex, sem = ranks(lex_values), ranks(np.asarray(semantic, dtype=np.float64))
    return (np.where(lex_values > 0, 1.0 / (k + lex), 0.0) + 1.0 / (k + sem)).tolist()  # type: ignore[no-any-return]


@settings(max_examples=300, deadline=None)
@given(st.data(), VALUES)
def test_fusion_ranking_only_the_lexical_hits_gives_the_floats_of_two_full_sorts(data: st.DataObject, lexical: list[float]) -> None:
    semantic = data.draw(st.lists(st.sampled_from([0.0, 0.1, 0.3, 0.3, 0.9, -0.2]), min_size=len(lexical), max_size=len(lexical)))
    expected = fused_by_two_full_sorts(lexical, semantic)
    assert rrf_fuse(lexical, semantic) == expected
    order = rank_order(np.asarray(semantic, dtype=np.float64))
    assert rrf_fuse_array(lexical, semantic, semantic_order=order).tolist() == expected


@settings(max_examples=300, deadline=None)
@given(VALUES, st.data())
def test_a_rank_order_grown_by_appended_values_is_the_order_of_them_all(values: list[float], data: st.DataObject) -> None:
    """New values merge after the larger old ones and before the equal ones (newer first)."""
    cut = data.draw(st.integers(0, len(values)))
    array = np.asarray(values, dtype=np.float64)
    grown = grown_rank_order(rank_order(array[:cut]), array)
    assert grown.tolist() == rank_order(array).tolist()
    with_nan = np.append(array, np.nan)
    assert grown_rank_order(rank_order(with_nan[:cut]), with_nan).tolist() == rank_order(with_nan).tolist()


class _Vectors:
    """Cosines fixed per content hash (ties on purpose), as a vector index gives them."""

    def embed_query(self, text: str) -> str:
        return text

    def similarity(self, query: str, keys: list[str]) -> np.ndarray:
        return np.asarray([(int(key) * 7 + len(query)) % 5 / 4 for key in keys], dtype=np.float64)


def test_the_prefilter_index_grows_its_cosine_order_with_the_store_and_starts_over_when_it_must() -> None:
    index = PrefilterIndex()
    vectors: Any = _Vectors()
    messages = [SimpleNamespace(content_hash=str(i)) for i in range(40)]
    for n in (5, 5, 12, 31, 40):
        cosines = index.goal_cosines(vectors, ["fix the parser"], messages[:n])
        assert index.cosine_order(cosines).tolist() == rank_order(cosines).tolist()
    other: Any = _Vectors()  # another vector index: the cosines, and their order, read afresh
    cosines = index.goal_cosines(other, ["fix the parser"], messages[:20])
    assert index.cosine_order(cosines).tolist() == rank_order(cosines).tolist()
    assert index.cosine_order(np.asarray([0.5, 0.5, 1.0])).tolist() == [2, 1, 0]  # not the goal's: sorted as given
