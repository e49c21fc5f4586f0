"""A JSON document as msgspec's indented text, its long lists formatted a chunk at a time.

``indented(doc)`` yields pieces whose concatenation is the bytes
``msgspec.json.format(msgspec.json.encode(doc), indent=1)`` gives. The document's long lists
(the report rows of ``genie simulate --json``: every collective instance, tens of MB at 4,096
ranks) are cut out and each formatted a few thousand items at a time through one reused encode
buffer, each chunk's text yielded as soon as it is made: no compact copy of the whole document
is made, no multi-MB buffer grows, and a writer that drops each piece once written keeps a few
MB in memory, not the whole text (whose fresh pages cost more system time than the encoding).
A list's items are formatted at their depth by wrapping each chunk in as many one-item lists,
whose brackets are then cut off: msgspec indents by depth alone, so the items read exactly as in
the whole document.

All that can refuse is settled before the first piece: the rest of the document is encoded
and where a cut list goes is found (else the whole document is formatted at once, the same
bytes); the long lists' items are encoded as they are written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from genie.errors import GenieError

LONG = 1024  # items: a list at least this long is formatted a chunk at a time
CHUNK = 2048  # items formatted together
INDENT = 1  # spaces per level, as ``genie simulate --json`` prints

_SLOT = "\x00genie-json-slot-{}\x00"  # stands for a cut-out list in the rest of the document

Piece = bytes | memoryview


class JsonTextError(GenieError):
    """msgspec's indented text was not framed as this module cuts it (a msgspec change)."""


def indented(
    doc: Any, enc_hook: Callable[[Any], Any] | None = None, long: int = LONG, chunk: int = CHUNK
) -> Iterator[Piece]:
    """``doc`` as indented JSON (``msgspec.json.format(..., indent=1)``), in pieces."""
    enc = msgspec.json.Encoder(enc_hook=enc_hook)
    lists: list[list] = []
    rest = _cut(doc, lists, long)
    text = msgspec.json.format(enc.encode(rest), indent=INDENT)
    plan: list[tuple[int, int, list, int]] = []  # where each list goes, its items, its depth
    pos = 0
    for k, items in enumerate(lists):
        token = enc.encode(_SLOT.format(k))
        at = text.find(token, pos)
        line = text.rfind(b"\n", 0, at) + 1
        spaces = len(text[line:at]) - len(text[line:at].lstrip(b" "))
        depth = spaces // INDENT
        # not there once (a string of the document reads as the slot): formatted whole
        if at < 0 or text.find(token, at + len(token)) >= 0 or not _framed(depth):
            yield msgspec.json.format(enc.encode(doc), indent=INDENT)
            return
        plan.append((at, at + len(token), items, depth))
        pos = at + len(token)
    whole = memoryview(text)
    buf = bytearray()
    pos = 0
    for at, end, items, depth in plan:
        yield whole[pos:at]
        yield from _list_text(enc, buf, items, depth, chunk)
        pos = end
    yield whole[pos:]


def _cut(value: Any, lists: list[list], long: int) -> Any:
    """``value`` with each list of ``long`` items or more (in plain dicts and lists) replaced
    by a slot string, the lists appended to ``lists`` in document order."""
    if type(value) is dict:
        return {k: _cut(v, lists, long) for k, v in value.items()}
    if type(value) is list:
        if value and len(value) >= long:
            lists.append(value)
            return _SLOT.format(len(lists) - 1)
        return [_cut(v, lists, long) for v in value]
    return value


def _frame(depth: int) -> tuple[bytes, bytes]:
    """The text before and after the items of a list wrapped in ``depth`` one-item lists."""
    head = b"".join(b" " * (INDENT * i) + b"[\n" for i in range(depth + 1))
    tail = b"".join(b"\n" + b" " * (INDENT * i) + b"]" for i in reversed(range(depth + 1)))
    return head, tail


def _wrapped(items: list, depth: int) -> list:
    for _ in range(depth):
        items = [items]
    return items


def _framed(depth: int) -> bool:
    """Whether msgspec frames a wrapped list's items as ``_frame`` says (checked on ``[0]``)."""
    head, tail = _frame(depth)
    text = msgspec.json.format(msgspec.json.encode(_wrapped([0], depth)), indent=INDENT)
    return text == head + b" " * (INDENT * (depth + 1)) + b"0" + tail


def _list_text(
    enc: msgspec.json.Encoder, buf: bytearray, items: list, depth: int, chunk: int
) -> Iterator[Piece]:
    """The indented text of the non-empty list ``items`` whose brackets sit at ``depth``."""
    head, tail = _frame(depth)
    yield b"[\n"
    for lo in range(0, len(items), chunk):
        enc.encode_into(_wrapped(items[lo : lo + chunk], depth), buf)
        text = msgspec.json.format(buf, indent=INDENT)
        if not (text.startswith(head) and text.endswith(tail)):  # _framed said it would be
            raise JsonTextError(f"msgspec framed a list at depth {depth} unlike its probe")
        if lo:
            yield b",\n"
        yield memoryview(text)[len(head) : len(text) - len(tail)]
    yield b"\n" + b" " * (INDENT * depth) + b"]"
