"""Find the line of a key in TOML text, since tomllib reports no positions for parsed keys.

A small line scanner: it tracks ``[table]`` and ``[[array]]`` headers (counting array
entries), ``key = value`` and dotted keys, and inline tables inside multi-line arrays. It only
needs to be right for the files genie ships and users write; when unsure it falls back to the
nearest enclosing table's line.
"""

from __future__ import annotations

import re

Path = tuple[str | int, ...]

_HEADER = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*$")
_KEY = re.compile(r'^\s*((?:[A-Za-z0-9_-]+|"[^"]*")(?:\s*\.\s*(?:[A-Za-z0-9_-]+|"[^"]*"))*)\s*=')
_INLINE_KEY = re.compile(r'(?:^|[{,])\s*([A-Za-z0-9_-]+|"[^"]*")\s*=')


def _strip_comment(line: str) -> str:
    """Drop a trailing ``# comment`` that is not inside a string."""
    quote: str | None = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _split_dotted(key: str) -> list[str]:
    return [part.strip().strip('"') for part in key.split(".")]


def key_lines(text: str) -> dict[Path, int]:
    """Map key paths (``("hosts", 0, "ranks")``) to 1-based line numbers in ``text``."""
    lines: dict[Path, int] = {}
    counters: dict[tuple[str, ...], int] = {}
    current: Path = ()
    array_key: Path | None = None  # inside `key = [` spanning lines
    array_index = -1
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw)
        if not line.strip():
            continue
        if array_key is not None:
            for _ in range(line.count("{")):
                array_index += 1
                lines.setdefault((*array_key, array_index), lineno)
            if array_index >= 0:
                for m in _INLINE_KEY.finditer(line):
                    lines.setdefault((*array_key, array_index, m.group(1).strip('"')), lineno)
            if "]" in line and line.count("[") < line.count("]"):
                array_key = None
            continue
        header = _HEADER.match(line)
        if header:
            names = tuple(_split_dotted(header.group(2)))
            if header.group(1) == "[[":
                idx = counters.get(names, 0)
                counters[names] = idx + 1
                current = (*names, idx)
                lines.setdefault(names, lineno)
            else:
                current = names
            lines.setdefault(current, lineno)
            continue
        key = _KEY.match(line)
        if key:
            path = (*current, *_split_dotted(key.group(1)))
            lines.setdefault(path, lineno)
            rest = line[key.end() :].strip()
            if rest.startswith("[") and rest.count("[") > rest.count("]"):
                array_key, array_index = path, -1
                for _ in range(rest.count("{")):
                    array_index += 1
                    lines.setdefault((*path, array_index), lineno)
            elif rest.startswith("["):
                for i, _ in enumerate(re.finditer(r"\{", rest)):
                    lines.setdefault((*path, i), lineno)
    return lines


def line_of(lines: dict[Path, int], path: Path) -> int | None:
    """The line of ``path``, or of its nearest ancestor that has one, or None."""
    p = tuple(path)
    while p:
        if p in lines:
            return lines[p]
        p = p[:-1]
    return None


def format_path(path: Path) -> str:
    """Render a key path as ``hosts[1].ranks``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out
