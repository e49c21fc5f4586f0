"""The one sanitiser for text a peer sent: bounded, and no control character survives.

Every control message is decoded by ``genie.wire.messages.decode``, which passes it through
``sanitize``: the free text of a message (an Error's message, a host's facts, names, versions,
reasons) is cut to a bound and its control and format characters (ESC, BEL, CR, LF, the C1 set,
bidirectional overrides...) are written as ``\\xNN`` / ``\\uNNNN`` escapes. Whatever a peer
sends, nothing it wrote can move a terminal's cursor, retitle it, or fill a screen or a store,
whether the text is logged, stored or printed.
"""

from __future__ import annotations

import unicodedata
from typing import Any

MAX_TEXT = 2000  # characters of one message text (an error, a reason)
MAX_NAME = 256  # characters of one name (agent, host, version, address, NIC field)
MAX_ITEMS = 256  # entries of a list or dict of names a peer reports (NICs, addresses, peers)


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _unsafe(ch: str) -> bool:
    return unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp")


def clean(text: str, limit: int = MAX_TEXT, keep: str = "") -> str:
    """``text`` with control and format characters escaped (those in ``keep`` stay), cut to
    ``limit`` characters with a note of how many were cut."""
    if len(text) > limit:
        cut = len(text) - limit
        text = text[:limit]
    else:
        cut = 0
    if not text.isprintable():
        text = "".join(_escape(c) if c not in keep and _unsafe(c) else c for c in text)
        if len(text) > limit:  # escapes lengthen it
            cut += len(text) - limit
            text = (
                text[:limit].rsplit("\\", 1)[0] if "\\" in text[limit - 6 : limit] else text[:limit]
            )
    return f"{text}... ({cut} more characters cut)" if cut else text


def clean_value(v: Any, limit: int = MAX_NAME) -> Any:
    """``v`` cleaned: strings bounded and escaped, lists and dicts of them bounded too."""
    if isinstance(v, str):
        return clean(v, limit)
    if isinstance(v, list):
        return [clean_value(x, MAX_NAME) for x in v[:MAX_ITEMS]]
    if isinstance(v, dict):
        return {
            clean(str(k), MAX_NAME): clean_value(x, MAX_NAME)
            for k, x in list(v.items())[:MAX_ITEMS]
        }
    return v


# per message type: its fields of peer text and their bound
TEXT_FIELDS: dict[str, dict[str, int]] = {
    "Hello": {"controller": MAX_NAME, "version": MAX_NAME, "testbed": MAX_NAME},
    "HelloReply": {"agent": MAX_NAME, "version": MAX_NAME, "data_addr": MAX_NAME},
    "HostFacts": {
        "hostname": MAX_NAME,
        "python": MAX_NAME,
        "platform": MAX_NAME,
        "host_id": MAX_NAME,
        "nics": MAX_NAME,
    },
    "Heartbeat": {"sender": MAX_NAME},
    "Error": {"code": MAX_NAME, "message": MAX_TEXT, "about": MAX_NAME},
    "Abort": {"reason": MAX_TEXT},
    "Ack": {"what": MAX_NAME},
    "DataProbeReply": {"peers": MAX_NAME},
    "WireConditions": {
        "congestion": MAX_NAME,
        "kernel": MAX_NAME,
        "sysctl": MAX_NAME,
        "nics": MAX_NAME,
    },
    "Prepared": {},
}
#: fields that hold a struct of peer text of their own (cleaned by its own TEXT_FIELDS entry)
NESTED = ("facts", "conditions")


def sanitize(obj: Any) -> Any:
    """``obj`` (a decoded message or host facts) with its peer text cleaned (see TEXT_FIELDS);
    the object itself when nothing needed it."""
    import msgspec

    fields = TEXT_FIELDS.get(type(obj).__name__)
    if fields is None:
        return obj
    changes: dict[str, Any] = {}
    for name, limit in fields.items():
        v = getattr(obj, name)
        new = clean_value(v, limit)
        if new != v:
            changes[name] = new
    for name in NESTED:
        inner = getattr(obj, name, None)
        if inner is not None and (clean_inner := sanitize(inner)) is not inner:
            changes[name] = clean_inner
    return msgspec.structs.replace(obj, **changes) if changes else obj
