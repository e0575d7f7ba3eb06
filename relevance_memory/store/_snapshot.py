"""Read-only snapshots of the message store: :class:`StoreSnapshot` (a consistent view of a
:class:`~relevance_memory.store._store.MessageStore` as it was at one moment, what a build reads)
and the views it is made of — the first ``n`` items of an append-only list and
``referenced_by`` / ``superseded_by`` / ``supersedes`` as they were at the snapshot. No
copies of the message list; reads stop at the snapshot's length.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from .._models import Message
from ..scoring._embedding import VectorIndex
from ._store import MessageStore
from ._supersede import SupersedeLink


class _Prefix(Sequence[Any]):
    """The first ``n`` items of an append-only list (a read-only view; no copy)."""

    __slots__ = ("_items", "_n")

    def __init__(self, items: Sequence[Any], n: int) -> None:
        self._items, self._n = items, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):  # O(slice): only the items asked for are read
            start, stop, step = index.indices(self._n)
            items = self._items
            return items[start:stop:step] if step > 0 else [items[i] for i in range(start, stop, step)]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        return itertools.islice(self._items, self._n)  # C speed; stops at the snapshot's length

    def __reversed__(self) -> Iterator[Any]:
        """Newest first, from the snapshot's last item: C speed, O(items read) (the
        inherited one indexes item by item through :meth:`__getitem__`)."""
        backwards = reversed(self._items)  # starts at the list's end as of now
        return itertools.islice(backwards, backwards.__length_hint__() - self._n, None)  # skip what came after


class _CodedPrefix(_Prefix):
    """The first ``n`` rows of a :class:`~relevance_memory.store._validate.StringRows` (a
    :class:`_Prefix`), also read as vocabulary numbers (``coded``, ``code``, ``code_space``:
    what the prefilter's BM25 index reads, issue 24)."""

    __slots__ = ()

    def coded(self, start: int, stop: int) -> Any:
        """:meth:`StringRows.coded <relevance_memory.store._validate.StringRows.coded>` of rows
        ``start`` to ``stop``, both at most the snapshot's length.

        Raises:
            IndexError: a row past the snapshot's length asked for.
        """
        if not 0 <= start <= stop <= self._n:
            raise IndexError(f"rows {start}:{stop} of {self._n}")
        rows: Any = self._items  # a StringRows
        return rows.coded(start, stop)

    def code(self, text: str) -> int | None:
        """The vocabulary number of ``text`` (of the whole store: a number never changes)."""
        rows: Any = self._items
        return rows.code(text)  # type: ignore[no-any-return]

    def code_space(self) -> Any:
        """The store's rows, whose vocabulary numbers these are."""
        return self._items


class _RefsView(Mapping[str, Sequence[str]]):
    """``referenced_by`` as it was when the snapshot was taken: only referencing messages
    with an index below the snapshot's length count."""

    __slots__ = ("_by_id", "_n", "_refs")

    def __init__(self, refs: Mapping[str, Sequence[str]], by_id: dict[str, int], n: int) -> None:
        self._refs, self._by_id, self._n = refs, by_id, n

    def _visible(self, ids: Sequence[str]) -> list[str]:
        by_id, n = self._by_id, self._n
        if not ids or by_id.get(ids[-1], n) < n:  # appended in index order: the common case is "all"
            return list(ids)
        return [i for i in ids if by_id.get(i, n) < n]

    def __getitem__(self, key: str) -> Sequence[str]:
        if self._by_id.get(key, self._n) >= self._n:
            raise KeyError(key)
        visible = self._visible(self._refs[key])
        if not visible:
            raise KeyError(key)
        return visible

    def get(self, key: str, default: Any = None) -> Any:  # without a KeyError per miss (most messages)
        refs = self._refs.get(key)
        if refs is None or self._by_id.get(key, self._n) >= self._n:
            return default
        return self._visible(refs) or default

    def __iter__(self) -> Iterator[str]:
        for key in list(self._refs):
            if self._by_id.get(key, self._n) < self._n and self._visible(self._refs[key]):
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _LinkView(Mapping[str, SupersedeLink]):
    """``superseded_by`` as it was when the snapshot was taken: a link counts only when its
    newer message is in the snapshot (links are written before their message is published)."""

    __slots__ = ("_by_id", "_links", "_n")

    def __init__(self, links: dict[str, SupersedeLink], by_id: dict[str, int], n: int) -> None:
        self._links, self._by_id, self._n = links, by_id, n

    def __getitem__(self, key: str) -> SupersedeLink:
        link = self._links[key]
        if self._by_id.get(link.newer, self._n) >= self._n:
            raise KeyError(key)
        return link

    def get(self, key: str, default: Any = None) -> Any:  # without a KeyError per miss (most messages)
        link = self._links.get(key)
        if link is None or self._by_id.get(link.newer, self._n) >= self._n:
            return default
        return link

    def __contains__(self, key: object) -> bool:
        link = self._links.get(key) if isinstance(key, str) else None
        return link is not None and self._by_id.get(link.newer, self._n) < self._n

    def __iter__(self) -> Iterator[str]:
        for key, link in list(self._links.items()):
            if self._by_id.get(link.newer, self._n) < self._n:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # the first visible link, not a count of them all (issue 24)
        by_id, n = self._by_id, self._n
        return any(by_id.get(link.newer, n) < n for link in list(self._links.values()))


class _SupersedesView(Mapping[str, Sequence[str]]):
    """``supersedes`` as it was when the snapshot was taken (newer ids in the snapshot only)."""

    __slots__ = ("_by_id", "_n", "_olders")

    def __init__(self, olders: Mapping[str, Sequence[str]], by_id: dict[str, int], n: int) -> None:
        self._olders, self._by_id, self._n = olders, by_id, n

    def __getitem__(self, key: str) -> Sequence[str]:
        if self._by_id.get(key, self._n) >= self._n:
            raise KeyError(key)
        return tuple(self._olders[key])

    def get(self, key: str, default: Any = None) -> Any:  # without a KeyError per miss (most messages)
        olders = self._olders.get(key)
        if olders is None or self._by_id.get(key, self._n) >= self._n:
            return default
        return tuple(olders)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._olders and self._by_id.get(key, self._n) < self._n

    def __iter__(self) -> Iterator[str]:
        for key in list(self._olders):
            if self._by_id.get(key, self._n) < self._n:
                yield key

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __bool__(self) -> bool:  # the first visible key, not a count of them all (issue 24)
        return next(iter(self), None) is not None


class StoreSnapshot:
    """A consistent, read-only view of a :class:`MessageStore` as it was at one moment.

    A build reads the store through one of these (``StoreSnapshot(store)``), so
    messages added by other threads or tasks while it runs are neither half-seen nor
    summarised as if they were old: they wait for the next build. Taking one is O(pending
    calls + excluded), not O(messages): the message list and per-message indexes are
    append-only and are read up to the snapshot's length. ``doc_freq`` is the live counter
    (term statistics may include a message added meanwhile; lookups stay safe).
    """

    def __init__(self, store: MessageStore) -> None:
        # read under the store's lock: no writer meanwhile, so every message what is read names
        # is below the snapshot's length
        with store.lock:
            self._store = store
            self._n = n = len(store.messages)
            self.messages: Sequence[Message] = _Prefix(store.messages, n)
            self.excluded: Mapping[str, str] = dict(store.excluded)
            self.doc_freq: Mapping[str, int] = store.doc_freq
            self.first_user_index: int | None = store.first_user_index
            self.step_count: int = store.step_count
            self.chain_merges: int = store.chain_merges
            self._unanswered = {i: store.unanswered_calls(i) for i in store.pending_calls}
            self.pending_calls: list[int] = sorted(self._unanswered)
            self._edited = store.edited_views()
            self._edits = store.file_edits()

    # the views of the append-only per-message lists and link tables, made on first use (each
    # reads only below the snapshot's length, so one made later is the same view; an append
    # reads none of them)
    @functools.cached_property
    def terms(self) -> Sequence[frozenset[str]]:
        """Each message's terms (the store's list up to the snapshot's length)."""
        return _CodedPrefix(self._store.terms, self._n)

    @functools.cached_property
    def idents(self) -> Sequence[frozenset[str]]:
        """Each message's identifiers (the store's list up to the snapshot's length)."""
        return _CodedPrefix(self._store.idents, self._n)

    @functools.cached_property
    def episodes(self) -> Sequence[int]:
        """Each message's episode (the store's list up to the snapshot's length)."""
        return _Prefix(self._store.episodes, self._n)

    @functools.cached_property
    def referenced_by(self) -> Mapping[str, Sequence[str]]:
        """``MessageStore.referenced_by`` as it was at the snapshot."""
        return _RefsView(self._store.referenced_by, self._store._by_id, self._n)

    @functools.cached_property
    def superseded_by(self) -> Mapping[str, SupersedeLink]:
        """``MessageStore.superseded_by`` as it was at the snapshot."""
        return _LinkView(self._store.superseded_by, self._store._by_id, self._n)

    @functools.cached_property
    def supersedes(self) -> Mapping[str, Sequence[str]]:
        """``MessageStore.supersedes`` as it was at the snapshot."""
        return _SupersedesView(self._store.supersedes, self._store._by_id, self._n)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Message]:
        return iter(self.messages)

    def __getitem__(self, index: int) -> Message:
        if type(index) is int and 0 <= index < self._n:  # the common case: one call, not two (an append reads ~25)
            return self._store.messages[index]
        return self.messages[index]  # negative or out of range: the view's rules

    def get(self, message_id: str) -> Message:
        """The message with ``message_id`` if it was in the store when the snapshot was taken.
        Raises ``KeyError`` naming the id."""
        index = self._store._by_id.get(message_id)
        if index is None or index >= self._n:
            raise KeyError(f"no message with id {message_id!r}")
        return self._store.messages[index]

    def indices(self, message_ids: Iterable[str]) -> list[int]:
        """The indices of ``message_ids``, in their order, if all were in the store when the
        snapshot was taken. Raises ``KeyError`` naming the first id that was not."""
        found, n = self._store.indices(message_ids), self._n
        if found and max(found) >= n:
            late = next(i for i in found if i >= n)
            raise KeyError(f"no message with id {self._store.messages[late].id!r}")
        return found

    def chain_root(self, index: int) -> int:
        """Index of the first message of the trace chain holding ``index`` (appending never
        moves an older message's root, so the live union-find answers for the snapshot too)."""
        if not 0 <= index < self._n:
            raise IndexError(index)
        return self._store.chain_root(index)

    def unanswered_calls(self, index: int) -> list[str]:
        """Tool call ids of the assistant message at ``index`` that had no result at the snapshot."""
        return list(self._unanswered.get(index, ()))

    def edited_views(self) -> dict[str, str]:
        """:meth:`MessageStore.edited_views` as it was at the snapshot (messages in it only)."""
        return dict(self._edited)

    def file_edits(self) -> dict[str, str]:
        """:meth:`MessageStore.file_edits` as it was at the snapshot (messages in it only)."""
        return dict(self._edits)

    def message_vectors(self) -> VectorIndex | None:
        """The store's vector index with every message of the snapshot embedded (it may hold
        rows of messages added since: they are keyed by content hash, so a build reads only its
        own), or ``None`` when the store keeps no vectors."""
        return self._store.message_vectors()
