"""A JSON document as msgspec's indented text, its long lists formatted a chunk at a time.

``indented(doc)`` gives the bytes ``msgspec.json.format(msgspec.json.encode(doc), indent=1)``
gives, as pieces to write one after another. The document's long lists (the report rows of
``genie simulate --json``: every collective instance, tens of MB at 4,096 ranks) are cut out
and each formatted a few thousand items at a time, through one reused encode buffer: no
compact copy of the whole document is made and no multi-MB buffer grows, which cost more than
the encoding itself. A list's items are formatted at their depth by wrapping each chunk in as
many one-item lists, whose brackets are then cut off: msgspec indents by depth alone, so the
items read exactly as in the whole document.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

LONG = 1024  # items: a list at least this long is formatted a chunk at a time
CHUNK = 2048  # items formatted together
INDENT = 1  # spaces per level, as ``genie simulate --json`` prints

_SLOT = "\x00genie-json-slot-{}\x00"  # stands for a cut-out list in the rest of the document


def indented(
    doc: Any, enc_hook: Callable[[Any], Any] | None = None, long: int = LONG, chunk: int = CHUNK
) -> list[bytes | memoryview]:
    """``doc`` as indented JSON (``msgspec.json.format(..., indent=1)``), in pieces."""
    enc = msgspec.json.Encoder(enc_hook=enc_hook)
    lists: list[list] = []
    rest = _cut(doc, lists, long)
    text = msgspec.json.format(enc.encode(rest), indent=INDENT)
    if not lists:
        return [text]
    pieces: list[bytes | memoryview] = []
    pos = 0
    buf = bytearray()
    for k, items in enumerate(lists):
        token = enc.encode(_SLOT.format(k))
        at = text.find(token, pos)
        if at < 0 or text.find(token, at + len(token)) >= 0:  # not there once: a string alike
            return [msgspec.json.format(enc.encode(doc), indent=INDENT)]
        line = text.rfind(b"\n", 0, at) + 1
        spaces = len(text[line:at]) - len(text[line:at].lstrip(b" "))
        formatted = _list_text(enc, buf, items, spaces // INDENT, chunk)
        if formatted is None:
            return [msgspec.json.format(enc.encode(doc), indent=INDENT)]
        pieces.append(text[pos:at])
        pieces.extend(formatted)
        pos = at + len(token)
    pieces.append(text[pos:])
    return pieces


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


def _list_text(
    enc: msgspec.json.Encoder, buf: bytearray, items: list, depth: int, chunk: int
) -> list[bytes | memoryview] | None:
    """The indented text of the non-empty list ``items`` whose brackets sit at ``depth``
    (None where msgspec's text is not framed as expected: the caller formats it whole)."""
    head = b"".join(b" " * (INDENT * i) + b"[\n" for i in range(depth + 1))
    tail = b"".join(b"\n" + b" " * (INDENT * i) + b"]" for i in reversed(range(depth + 1)))
    out: list[bytes | memoryview] = [b"[\n"]
    for lo in range(0, len(items), chunk):
        wrapped: Any = items[lo : lo + chunk]
        for _ in range(depth):
            wrapped = [wrapped]
        enc.encode_into(wrapped, buf)
        text = msgspec.json.format(buf, indent=INDENT)
        if not (text.startswith(head) and text.endswith(tail)):
            return None
        if lo:
            out.append(b",\n")
        out.append(memoryview(text)[len(head) : len(text) - len(tail)])
    out.append(b"\n" + b" " * (INDENT * depth) + b"]")
    return out
