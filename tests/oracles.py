"""Full-pass oracles: what a shortcut of issue 24 must give, computed the slow, obvious way."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from relevance_memory.pipeline.prefilter import PrefilterResult

__all__ = ["prefilter_by_every_chain"]


def prefilter_by_every_chain(chains: Mapping[int, Sequence[int]], doc_scores: Sequence[float], *, top_n: int,
                             always: Collection[int], tokens: Mapping[int, int] | None = None,
                             min_tokens: int = 0, layout: object = None) -> PrefilterResult:
    """:func:`~relevance_memory.pipeline.prefilter.prefilter_chains` chain by chain: best score
    first, then the newer chain; admitted while quota is left, always-pass, or below ``min_tokens``
    (``chains`` and ``tokens`` read as given: a ``layout`` the caller keeps is not read)."""
    best = {root: max(float(doc_scores[i]) for i in members) for root, members in chains.items()}
    admitted: list[int] = []
    room, held, rejected = top_n, 0, {}
    for root in sorted(chains, key=lambda r: (-best[r], -max(chains[r]))):
        if room > 0 or root in always or held < min_tokens:
            admitted.append(root)
        else:
            rejected[root] = best[root]
        room -= len(chains[root])
        held += (tokens or {}).get(root, 0)
    return PrefilterResult(admitted=sorted(admitted), rejected=rejected)
