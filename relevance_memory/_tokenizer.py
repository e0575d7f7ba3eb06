"""Token counting seam: exact BPE counts with offline encodings, plus OpenAI framing.

The encodings ship inside the package (``_encodings/*.tiktoken.gz``): they are the
official ``o200k_base`` and ``cl100k_base`` rank files, byte for byte — each is checked
against the sha256 that tiktoken itself pins in ``tiktoken_ext/openai_public.py`` — so
counting needs no network on a fresh machine (case C09).

Message framing follows OpenAI's cookbook "How to count tokens with tiktoken":
3 tokens per message, +1 when ``name`` is set, and 3 tokens priming the reply once per
request. Tool calls cost their function name and argument string (a custom tool call:
its name and input) plus ``TOOL_CALL_OVERHEAD`` tokens each (case C08). Images cost a
bounded amount that does not depend on the base64 length (case C10): OpenAI's tile rule
when the image size can be read from the data URL (or an Anthropic base64 ``source``),
otherwise a documented default.

Content parts are counted by what they carry: text parts by their text; Anthropic
``tool_use`` parts like a tool call (name, input as JSON, overhead); ``tool_result`` parts
by the parts inside them (text by its text, images as images); ``thinking`` by its text;
audio and files at the bounded placeholder cost; a part of any other shape by the strings
inside it, an encoded payload inside it at the placeholder cost — never by its base64 size
and never as a flat image.
"""

from __future__ import annotations

import base64
import binascii
import functools
import gzip
import hashlib
import json
import math
import struct
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, Literal, Protocol, runtime_checkable

import tiktoken

from ._exceptions import TokenizerError
from ._models import is_blob, leaf_texts

__all__ = [
    "FRAMED_FIELDS",
    "IMAGE_TOKENS_LOW",
    "IMAGE_TOKENS_MAX",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOOL_CALL_OVERHEAD",
    "TiktokenCounter",
    "TokenCounter",
    "image_tokens",
    "tools_tokens",
]

TOKENS_PER_MESSAGE = 3
"""Framing tokens per chat message (OpenAI cookbook, gpt-3.5-turbo-0613 and later)."""
TOKENS_PER_NAME = 1
"""Extra token when a message carries ``name`` (OpenAI cookbook)."""
REPLY_PRIMING_TOKENS = 3
"""Tokens priming the assistant reply, once per request (OpenAI cookbook)."""
TOOL_CALL_OVERHEAD = 8
"""Framing tokens per tool call on top of its name and argument string (measured
against OpenAI usage reports; an upper estimate so budgets err on the safe side)."""
IMAGE_TOKENS_LOW = 85
"""OpenAI's cost of a ``detail: low`` image, and the base cost of a high-detail one."""
IMAGE_TOKENS_PER_TILE = 170
"""OpenAI's cost per 512×512 tile of a high-detail image."""
IMAGE_TOKENS_MAX = IMAGE_TOKENS_LOW + IMAGE_TOKENS_PER_TILE * 8
"""Upper bound of one image: 768×2048 after scaling is 2×4 tiles → 1,445 tokens."""

# sha256 of the official rank files, as pinned by tiktoken_ext/openai_public.py
_EXPECTED_SHA256 = {
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}
_PAT_STR = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
_SPECIAL = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


@functools.lru_cache(maxsize=2)
def load_encoding(name: Literal["o200k_base", "cl100k_base"]) -> tiktoken.Encoding:
    """Load a shipped encoding, verify its checksum, and build a ``tiktoken.Encoding``.

    Raises:
        TokenizerError: the name is unknown, the file is missing or its sha256 differs.
    """
    if name not in _EXPECTED_SHA256:
        raise TokenizerError(f"unknown encoding {name!r}; use 'o200k_base' or 'cl100k_base'")
    try:
        packed = resources.files("relevance_memory").joinpath(f"_encodings/{name}.tiktoken.gz")
        data = gzip.decompress(packed.read_bytes())
    except (OSError, EOFError) as exc:
        raise TokenizerError(f"cannot read the shipped {name} encoding: {exc}") from exc
    digest = hashlib.sha256(data).hexdigest()
    if digest != _EXPECTED_SHA256[name]:
        raise TokenizerError(f"{name} encoding file is corrupt (sha256 {digest})")
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in data.splitlines() if line)
    }
    return tiktoken.Encoding(
        name=name, pat_str=_PAT_STR[name], mergeable_ranks=ranks, special_tokens=_SPECIAL[name]
    )


@runtime_checkable
class TokenCounter(Protocol):
    """Seam for token counting. Implementations must be deterministic and offline."""

    name: str

    def count_text(self, text: str) -> int:
        """Tokens of a plain string (no framing)."""
        ...

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of many strings, in order (may run in parallel)."""
        ...

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens one OpenAI chat message costs in a request, framing included."""
        ...


def _png_size(head: bytes) -> tuple[int, int] | None:
    if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR" and len(head) >= 24:
        width, height = struct.unpack(">II", head[16:24])
        return int(width), int(height)
    return None


def _gif_size(head: bytes) -> tuple[int, int] | None:
    if head[:6] in (b"GIF87a", b"GIF89a") and len(head) >= 10:
        width, height = struct.unpack("<HH", head[6:10])
        return int(width), int(height)
    return None


def _jpeg_size(head: bytes) -> tuple[int, int] | None:
    if head[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 < len(head):
        if head[i] != 0xFF:
            return None
        marker = head[i + 1]
        length = struct.unpack(">H", head[i + 2 : i + 4])[0]
        if marker in (0xC0, 0xC1, 0xC2):
            height, width = struct.unpack(">HH", head[i + 5 : i + 9])
            return int(width), int(height)
        i += 2 + length
    return None


def _image_size(url: str) -> tuple[int, int] | None:
    """Width and height from the first bytes of a base64 data URL, when readable."""
    if not url.startswith("data:") or "," not in url:
        return None
    b64 = url.split(",", 1)[1][:8192]
    b64 = b64[: len(b64) - len(b64) % 4]
    try:
        head = base64.b64decode(b64, validate=False)
    except (binascii.Error, ValueError):
        return None
    for sniff in (_png_size, _gif_size, _jpeg_size):
        size = sniff(head)
        if size and size[0] > 0 and size[1] > 0:
            return size
    return None


def image_tokens(part: Mapping[str, Any], default: int = 765) -> int:
    """Tokens of one image content part, bounded by :data:`IMAGE_TOKENS_MAX`.

    Rule (OpenAI vision pricing): ``detail: low`` costs 85. Otherwise the image is
    scaled to fit 2048×2048, then its short side to 768, and costs
    ``85 + 170 × tiles`` with 512-pixel tiles. When the size cannot be read from the
    data URL (remote URL, unknown format, damaged header) the cost is ``default``
    (765 = a 1024×1024 image). The base64 length never matters (case C10).
    """
    spec = part.get("image_url", part.get("image", {}))
    source = part.get("source")
    if isinstance(source, Mapping):  # Anthropic: {type: base64, media_type, data} or {type: url, url}
        if source.get("type") == "base64":
            spec = {"url": f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"}
        else:
            spec = {"url": str(source.get("url", ""))}
    url = spec.get("url", "") if isinstance(spec, Mapping) else str(spec or "")
    detail = spec.get("detail", "auto") if isinstance(spec, Mapping) else "auto"
    if detail == "low":
        return IMAGE_TOKENS_LOW
    size = _image_size(url)
    if size is None:
        return min(max(default, IMAGE_TOKENS_LOW), IMAGE_TOKENS_MAX)
    fit = min(1.0, 2048 / max(size))
    w, h = size[0] * fit, size[1] * fit
    short = min(1.0, 768 / min(w, h))
    w, h = w * short, h * short
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_TOKENS_LOW + IMAGE_TOKENS_PER_TILE * tiles


def unshared(text: str) -> str:
    """``text`` itself when it is ASCII, else a new string equal to it, to hand to a Rust
    reader (tiktoken, tokenizers, sentencex) in its place.

    Reading a non-ASCII ``str`` as UTF-8 (PyO3, ``PyUnicode_AsUTF8AndSize``) keeps the UTF-8
    copy inside that string object for as long as it lives — a stored message's content, an
    excerpt kept from build to build — 1–1.5× its size again (issue 24: 44 bytes a message of a
    100k first build's memory were such copies; a history in Chinese would double its text).
    The copy is freed with the count. O(len) ``memcpy``; ASCII text needs none (its UTF-8 is its
    data; ``isascii`` reads a flag). Anything but a ``str`` is returned as it is, so the reader
    raises its own error."""
    return "".join((text, "")) if type(text) is str and not text.isascii() else text


class TiktokenCounter:
    """Exact token counts with a shipped tiktoken encoding (no network).

    Args:
        encoding: ``"o200k_base"`` (GPT-4o and later) or ``"cl100k_base"`` (GPT-4, 3.5).
        image_tokens: cost of an image whose size cannot be read (tokens).

    Raises:
        TokenizerError: the encoding cannot be loaded.
    """

    def __init__(
        self, encoding: Literal["o200k_base", "cl100k_base"] = "o200k_base", *, image_tokens: int = 765
    ) -> None:
        self.name: str = encoding
        self._enc = load_encoding(encoding)
        self._image_default = image_tokens

    def count_text(self, text: str) -> int:
        """Tokens of ``text``; special-token strings count as ordinary text. A text with a
        non-ASCII character is counted from a copy (:func:`unshared`)."""
        return len(self._enc.encode_ordinary(unshared(text))) if text else 0

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each string in ``texts``, one after another: tiktoken's batch call starts a
        thread pool per call, which cost an excerpt's per-line counts ~50 µs a line (a 30k-message
        first build spent 10 s of 17 s starting threads, issue 24); the counts are the same."""
        encode = self._enc.encode_ordinary
        return [len(encode(unshared(text))) if text else 0 for text in texts]

    def _content_tokens(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        total = 0
        for part in content:
            if isinstance(part, str):
                total += self.count_text(part)
            elif isinstance(part, Mapping):
                total += self._part_tokens(part)
        return total

    def _part_tokens(self, part: Mapping[str, Any]) -> int:
        """Tokens of one content part (module doc: by what it carries)."""
        kind = part.get("type")
        if kind in ("image_url", "image", "input_image"):
            return image_tokens(part, self._image_default)
        if kind in ("text", "input_text", "output_text"):
            return self.count_text(str(part.get("text", "")))
        if kind == "refusal":
            return self.count_text(str(part.get("refusal", "")))
        if kind == "thinking":
            return self.count_text(str(part.get("thinking", "")))
        if kind == "tool_use":
            arguments = json.dumps(part.get("input", {}), ensure_ascii=False, default=str)
            return TOOL_CALL_OVERHEAD + self.count_text(str(part.get("name", ""))) + self.count_text(arguments)
        if kind == "tool_result":
            inner = part.get("content")
            return TOOL_CALL_OVERHEAD + (self._content_tokens(inner) if isinstance(inner, (str, list, tuple)) else 0)
        if kind in ("input_audio", "audio", "file", "input_file"):
            return self._image_default  # a bounded placeholder cost, never the base64 payload
        if kind == "document":
            source = part.get("source")
            if isinstance(source, Mapping) and source.get("type") == "text":
                return self.count_text(str(source.get("data", "")))
            if isinstance(source, Mapping) and source.get("type") == "content":
                inner = source.get("content")
                return self._content_tokens(inner) if isinstance(inner, (str, list, tuple)) else 0
            return self._image_default
        # a shape we do not know: the text it carries, each encoded payload at the placeholder cost
        return sum(self.count_texts(leaf_texts(part))) + _count_blobs(part) * self._image_default

    def count_message(self, message: Mapping[str, Any]) -> int:
        """Tokens of one OpenAI chat message, framing included (OpenAI cookbook rule)."""
        total = TOKENS_PER_MESSAGE + self.count_text(str(message.get("role", "")))
        total += self._content_tokens(message.get("content"))
        name = message.get("name")
        if name:
            total += TOKENS_PER_NAME + self.count_text(str(name))
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            custom = call.get("type") == "custom"
            payload = call.get("custom" if custom else "function")
            payload = payload if isinstance(payload, Mapping) else {}
            total += TOOL_CALL_OVERHEAD
            total += self.count_text(str(payload.get("name", "")))
            total += self.count_text(str(payload.get("input" if custom else "arguments", "") or ""))
        if not FRAMED_FIELDS.issuperset(message):  # a field beyond them (no set made: ~0.1 µs)
            total += self._other_fields_tokens(message)
        return total

    def _other_fields_tokens(self, message: Mapping[str, Any]) -> int:
        """Tokens of the fields of ``message`` beyond the chat fields (``reasoning_content``,
        ``reasoning``, a message-level ``refusal``, ``thinking_blocks`` …, case C08's kind): they
        are sent with the message, so their text counts like text, each encoded payload at the
        placeholder cost; ``None`` and empty values cost nothing."""
        total = 0
        for key, value in message.items():
            if key in FRAMED_FIELDS or value is None or isinstance(value, bool):
                continue
            if isinstance(value, (int, float)):
                total += self.count_text(str(value))
            else:
                total += sum(self.count_texts(leaf_texts(value))) + _count_blobs(value) * self._image_default
        return total


FRAMED_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id", "anthropic"})
"""Fields :meth:`TiktokenCounter.count_message` counts on their own (``anthropic`` is the
store's note of Anthropic block fields, converted by ``to_anthropic``, never sent as it is)."""


def _count_blobs(value: Any) -> int:
    if isinstance(value, str):
        return 1 if is_blob(value) else 0
    if isinstance(value, Mapping):
        return sum(_count_blobs(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_count_blobs(v) for v in value)
    return 0


def tools_tokens(counter: TokenCounter, tools: Sequence[Any] | None) -> int:
    """Tokens the ``tools=`` schema of a request costs (tokens): the JSON of the tool
    definitions counted with ``counter`` (pydantic objects dumped first); 0 for no tools.

    The API does not publish how it frames tool schemas; the JSON text is a close upper
    estimate (OpenAI cookbook "How to count tokens", function-calling section).
    """
    if not tools:
        return 0
    plain = [t.model_dump(exclude_none=True) if hasattr(t, "model_dump") else t for t in tools]
    return counter.count_text(json.dumps(plain, ensure_ascii=False, default=str))
