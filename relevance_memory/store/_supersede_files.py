"""File views for supersede detection (SPEC §10, issue 11): which file, and which lines of
it, a shell command shows or writes whole (``cat F``, ``sed -n 'a,bp' F``, ``cd D && …``,
heredoc writes), and whether a command's output reports a failure. Pure parsing, no state;
:class:`~relevance_memory.store._supersede.SupersedeDetector` links the views (``resource`` links).
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from .._text import is_error_output

_MAX_COMMAND_CHARS = 1_000
"""Characters of a shell command's first line parsed for file views (heredoc bodies are not parsed)."""


# --------------------------------------------------------------------------- file views
@dataclass(frozen=True, slots=True)
class FileView:
    """A view of a file that a command shows or writes.

    Attributes:
        path: normalised path (``cd D && cat F`` → ``D/F``).
        start, end: 1-based line range shown, ``end`` ``None`` for "to the end".
        write: the command writes the whole file (its content is in the call).
    """

    path: str
    start: int = 1
    end: int | None = None
    write: bool = False

    def contains(self, other: FileView) -> bool:
        """Whether this view shows every line ``other`` shows (same path)."""
        if self.path != other.path or self.start > other.start:
            return False
        if self.end is None:
            return True
        return other.end is not None and other.end <= self.end

    @property
    def label(self) -> str:
        """``a/b.py`` (whole file) or ``a/b.py lines 10–40``."""
        if self.start == 1 and self.end is None:
            return self.path
        return f"{self.path} lines {self.start}–{self.end if self.end is not None else 'end'}"


_HEREDOC_WRITE = re.compile(
    r"^\s*cat\s+(?:<<-?\s*['\"]?\w+['\"]?\s*>\s*(?P<a>[^\s;&|<>]+)|>\s*(?P<b>[^\s;&|<>]+)\s*<<-?\s*['\"]?\w+['\"]?)\s*$"
)
_VIEW_START = re.compile(r"\s*(?:cd\s+\S+\s*(?:&&|;)\s*)*(?:cat|nl|sed|head)\s")
_SED_RANGE = re.compile(r"^(\d+)(?:,(\d+|\$))?p$")
_SEPARATORS = frozenset({"&&", ";", "||", "\n"})


_WORD = r"(?:[^ \t\r\n'\"\\{p}]|\\.|'[^']*'|\"(?:[^\"\\]|\\.)*\")+"
_WORDS = re.compile(_WORD.format(p=";&|<>") + r"|[;&|<>]+", re.DOTALL)
_WORDS_PLAIN = re.compile(_WORD.format(p=""), re.DOTALL)
_QUOTED = re.compile(r"'([^']*)'|\"((?:[^\"\\]|\\.)*)\"|\\(.)", re.DOTALL)
_ESCAPED_IN_DOUBLE = re.compile(r'\\([\\"])')
_SPACE = re.compile(r"[ \t\r\n]+")


def _unquote(match: re.Match[str]) -> str:
    single, double, escaped = match.groups()
    if single is not None:
        return single
    if double is not None:  # in double quotes a backslash escapes only a backslash or a quote
        return _ESCAPED_IN_DOUBLE.sub(r"\1", double)
    return escaped


def shell_words(text: str, *, punctuation: bool) -> list[str] | None:
    """The words of a shell command line as POSIX ``shlex`` splits them (``whitespace_split``,
    no comments; with ``punctuation``, runs of ``;&|<>`` are tokens of their own, as with
    ``punctuation_chars=";&|<>"``), or ``None`` when ``shlex`` raises (an unclosed quote, a
    trailing backslash).

    Split by one regular expression — quotes and escapes removed as ``shlex`` removes them —
    rather than by ``shlex``, which is pure Python (≈1 ms a command; supersede detection reads
    every command an agent runs, issue 24). Where the expression does not account for every
    character, ``shlex`` itself decides."""
    pattern = _WORDS if punctuation else _WORDS_PLAIN
    words: list[str] = []
    end = 0
    for match in pattern.finditer(text):
        if match.start() > end and not _SPACE.fullmatch(text, end, match.start()):
            break  # something no word takes (an unclosed quote): shlex decides
        words.append(match.group())
        end = match.end()
    else:
        if end == len(text) or _SPACE.fullmatch(text, end):
            return [_QUOTED.sub(_unquote, w) for w in words]
    try:
        if not punctuation:
            return shlex.split(text)
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|<>")
        lexer.whitespace_split = True
        lexer.commenters = ""
        return list(lexer)
    except ValueError:
        return None


def _norm_path(path: str, cwd: str) -> str | None:
    if not path or path.startswith("-") or any(c in path for c in "*?$`{}"):
        return None
    joined = path if path.startswith("/") or not cwd else posixpath.join(cwd, path)
    return posixpath.normpath(joined)


def _range_of(stage: list[str]) -> tuple[int, int | None] | None:
    """Line range a range filter (``sed -n 'a,bp'``, ``head -n N``) keeps; ``None`` if not one."""
    if not stage:
        return None
    if stage[0] == "sed" and len(stage) == 3 and stage[1] == "-n":
        m = _SED_RANGE.match(stage[2])
        if m:
            start = int(m.group(1))
            end = m.group(2)
            return start, (None if end == "$" else int(end) if end else start)
    if stage[0] == "head":
        args = stage[1:]
        if len(args) == 2 and args[0] == "-n" and args[1].isdigit():
            return 1, int(args[1])
        if len(args) == 1 and args[0].startswith("-") and args[0][1:].isdigit():
            return 1, int(args[0][1:])
        if len(args) == 1 and args[0].startswith("-n") and args[0][2:].isdigit():
            return 1, int(args[0][2:])
    return None


def _source_view(stage: list[str], cwd: str) -> FileView | None:
    """The file a pipeline's first stage shows, with its range (``None`` if not a view)."""
    if not stage:
        return None
    cmd, args = stage[0], stage[1:]
    files: list[str] = []
    start, end = 1, None
    if cmd == "cat":
        flags = [a for a in args if a.startswith("-")]
        if any(f not in ("-n", "-A", "-v", "-e", "-t") for f in flags):
            return None
        files = [a for a in args if not a.startswith("-")]
    elif cmd == "nl":
        files = [a for a in args if not a.startswith("-")]
    elif cmd == "sed":
        if len(args) != 3 or args[0] != "-n":
            return None
        m = _SED_RANGE.match(args[1])
        if not m:
            return None
        start = int(m.group(1))
        end = None if m.group(2) == "$" else int(m.group(2)) if m.group(2) else start
        files = [args[2]]
    elif cmd == "head":
        rng = _range_of(stage[:-1]) if len(stage) > 2 else (1, 10)
        if rng is None:
            return None
        start, end = rng
        files = [stage[-1]]
    else:
        return None
    if len(files) != 1:
        return None
    path = _norm_path(files[0], cwd)
    return FileView(path, start, end) if path else None


def file_views(command: str) -> list[FileView]:
    """Files a shell command shows (reads) or writes whole, with the lines shown.

    Recognised: ``cat F``, ``cat -n F``, ``nl [-ba] F``, ``sed -n 'a,bp' F``,
    ``head [-n N] F``, those piped into ``sed -n 'a,bp'`` or ``head -n N``,
    ``cd D && …`` (paths resolved against ``D``), and heredoc writes
    ``cat <<'EOF' > F`` / ``cat > F <<EOF``. Anything else (redirections, globs,
    variables, several files, ``grep``) is not a view. Never raises.

    Returns:
        the views in command order (usually zero or one).
    """
    first_line, _, _ = command.partition("\n")
    write = _HEREDOC_WRITE.match(first_line)
    if write:
        path = _norm_path(write.group("a") or write.group("b") or "", "")
        return [FileView(path, 1, None, write=True)] if path else []
    if _VIEW_START.match(first_line) is None:  # cheap test first: shlex is slow (pure Python)
        return []
    tokens = shell_words(first_line[:_MAX_COMMAND_CHARS], punctuation=True)
    if tokens is None:
        return []
    views: list[FileView] = []
    cwd = ""
    segment: list[str] = []
    for token in [*tokens, ";"]:
        if token not in _SEPARATORS and token != "&" and not (set(token) <= set(";&")):
            segment.append(token)
            continue
        if segment:
            if segment[0] == "cd" and len(segment) == 2:
                cwd = _norm_path(segment[1], cwd) or cwd
            elif not any(t in ("<", ">", ">>", "<<", "<<<", "&>", ">&") for t in segment):
                stages: list[list[str]] = [[]]
                for t in segment:
                    if t == "|":
                        stages.append([])
                    else:
                        stages[-1].append(t)
                view = _source_view(stages[0], cwd)
                if view is not None:
                    for stage in stages[1:]:
                        rng = _range_of(stage)
                        if rng is None:
                            view = None
                            break
                        lo = view.start + rng[0] - 1
                        hi = None if rng[1] is None else view.start + rng[1] - 1
                        if view.end is not None:
                            hi = view.end if hi is None else min(hi, view.end)
                        view = FileView(view.path, lo, hi)
                    if view is not None:
                        views.append(view)
        segment = []
    return views


_SED_IN_PLACE = re.compile(r"^sed\s+(?:-\w*i\w*|--in-place)\b")
_REDIRECT_TARGET = re.compile(r"(?:^|\s)>{1,2}\s*([^\s<>|;&]+)\s*$")


def edited_paths(command: str) -> set[str]:
    """Files a shell command edits (issue 11: "the newest view of every file the agent edited").

    Recognised on the command's first line: a whole-file heredoc write (also after ``cd D &&``),
    ``sed -i … F`` (the last argument), and a redirection ``… > F`` / ``… >> F`` ending a
    command segment (``&&``, ``;``, ``||``; ``cd D && …`` resolves against ``D``). Globs,
    variables and ``/dev/…`` are not files. Never raises.

    Returns:
        normalised paths, as :func:`file_views` gives them.
    """
    return _edited_paths(command, file_views(command))


def _edited_paths(command: str, views: Iterable[FileView]) -> set[str]:
    """:func:`edited_paths` given the command's :func:`file_views` (parsed once by the caller)."""
    out = {v.path for v in views if v.write}
    first = command.split("\n", 1)[0][:_MAX_COMMAND_CHARS]
    cwd = ""
    for part in re.split(r"&&|;|\|\|", first):
        part = part.strip()
        if part.startswith("cd "):
            cwd = _norm_path(part[3:].strip(), cwd) or cwd
            continue
        target = None
        heredoc = _HEREDOC_WRITE.match(part)
        if heredoc:
            target = heredoc.group("a") or heredoc.group("b")
        elif _SED_IN_PLACE.match(part):
            words = shell_words(part, punctuation=False)
            if words is None:
                continue
            if len(words) >= 3 and not words[-1].startswith("-"):
                target = words[-1]
        elif not part.startswith("cat <<"):
            m = _REDIRECT_TARGET.search(part)
            if m:
                target = m.group(1)
        path = _norm_path(target, cwd) if target else None
        if path and not path.startswith("/dev/"):
            out.add(path)
    return out


_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>|\bexit code:?\s*(-?\d+)", re.IGNORECASE)


def _failed(output: str) -> bool:
    m = _RETURNCODE.search(output[:500])
    if m:
        return (m.group(1) or m.group(2)) != "0"
    return is_error_output(output[:2_000])
