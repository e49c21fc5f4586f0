"""A readable, lossless JSON form of Chakra traces (``genie workload convert``).

Document: ``{"format": "genie-chakra-json", "format_version": 1, "name", "groups", "ranks":
[{"rank", "metadata": {"version", "attrs"}, "nodes": [...]}]}``. Node types are written by name
(``COMP_NODE``), attrs as ``{"name", "kind", "value"[, "doc_string"]}`` with bytes in base64.
Converting ``.et`` to JSON and back gives the same bytes.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from genie.errors import WorkloadError
from genie.workload.model import Attr, IOInfo, Metadata, Node, NodeType, RankGraph, Workload

FORMAT = "genie-chakra-json"
FORMAT_VERSION = 1


def _attr_to(a: Attr) -> dict[str, Any]:
    v = a.value
    if a.kind == "bytes_val":
        v = base64.b64encode(v).decode()
    elif a.kind == "bytes_list":
        v = [base64.b64encode(x).decode() for x in v]
    d: dict[str, Any] = {"name": a.name, "kind": a.kind, "value": v}
    if a.doc_string:
        d["doc_string"] = a.doc_string
    return d


def _attr_from(d: dict[str, Any], where: str) -> Attr:
    try:
        kind = d["kind"]
        v: Any = d.get("value")
        if kind == "bytes_val":
            v = base64.b64decode(v)
        elif kind == "bytes_list":
            v = [base64.b64decode(x) for x in v]
        return Attr(d["name"], kind, v, d.get("doc_string", ""))
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkloadError(f"{where}: bad attr {d!r}: {exc}") from None


def _io_to(io: IOInfo | None) -> dict[str, str] | None:
    return None if io is None else {"values": io.values, "shapes": io.shapes, "types": io.types}


def node_to_json(n: Node) -> dict[str, Any]:
    """The JSON object of one node."""
    try:
        t: int | str = NodeType(n.type).name
    except ValueError:
        t = int(n.type)
    d: dict[str, Any] = {"id": n.id, "name": n.name, "type": t}
    if n.data_deps:
        d["data_deps"] = list(n.data_deps)
    if n.raw_ctrl_deps:
        d["ctrl_deps"] = list(n.raw_ctrl_deps)
    if n.start_time_micros:
        d["start_time_micros"] = n.start_time_micros
    if n.duration_micros:
        d["duration_micros"] = n.duration_micros
    if n.inputs is not None:
        d["inputs"] = _io_to(n.inputs)
    if n.outputs is not None:
        d["outputs"] = _io_to(n.outputs)
    d["attrs"] = [_attr_to(a) for a in n.attrs]
    return d


def node_from_json(d: dict[str, Any], where: str) -> Node:
    """Build a node from its JSON object."""
    try:
        t = d.get("type", 0)
        t = NodeType[t] if isinstance(t, str) else int(t)
        io_in, io_out = d.get("inputs"), d.get("outputs")
        return Node(
            int(d["id"]),
            d.get("name", ""),
            t,
            data_deps=[int(x) for x in d.get("data_deps", [])],
            ctrl_deps=[int(x) for x in d.get("ctrl_deps", [])],
            start_time_micros=int(d.get("start_time_micros", 0)),
            duration_micros=int(d.get("duration_micros", 0)),
            inputs=IOInfo(**io_in) if io_in is not None else None,
            outputs=IOInfo(**io_out) if io_out is not None else None,
            attrs=[_attr_from(a, where) for a in d.get("attrs", [])],
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise WorkloadError(f"{where}: bad node {str(d)[:80]}: {exc!r}") from None


def rank_to_json(rg: RankGraph) -> dict[str, Any]:
    """The JSON object of one rank."""
    return {
        "rank": rg.rank,
        "metadata": {
            "version": rg.metadata.version,
            "attrs": [_attr_to(a) for a in rg.metadata.attrs],
        },
        "nodes": [node_to_json(n) for n in rg.nodes],
    }


def workload_to_json(wl: Workload) -> dict[str, Any]:
    """The JSON document of a workload."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "name": wl.name,
        "groups": {k: list(v) for k, v in wl.groups.items()},
        "ranks": [rank_to_json(rg) for rg in wl.ranks],
    }


def workload_from_json(doc: Any, where: str = "<json>") -> Workload:
    """Build a workload from its JSON document (not validated)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise WorkloadError(f"{where}: not a {FORMAT} document")
    if doc.get("format_version") != FORMAT_VERSION:
        raise WorkloadError(f"{where}: unsupported format_version {doc.get('format_version')}")
    ranks = []
    for i, r in enumerate(doc.get("ranks", [])):
        try:
            md = r["metadata"]
            meta = Metadata(md.get("version", ""), [_attr_from(a, where) for a in md["attrs"]])
            nodes = [node_from_json(n, f"{where} rank {r['rank']}") for n in r["nodes"]]
            ranks.append(RankGraph(rank=int(r.get("rank", i)), nodes=nodes, metadata=meta))
        except (KeyError, TypeError, AttributeError) as exc:
            raise WorkloadError(f"{where}: bad rank entry #{i}: {exc!r}") from None
    groups = {str(k): tuple(int(x) for x in v) for k, v in doc.get("groups", {}).items()}
    return Workload(ranks=ranks, groups=groups, name=doc.get("name", ""))


def read_json(path: str | Path) -> Workload:
    """Read a JSON-form workload file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as exc:
        raise WorkloadError(f"{p}: cannot read: {exc.strerror}") from None
    except ValueError as exc:
        raise WorkloadError(f"{p}: not valid JSON: {exc}") from None
    return workload_from_json(doc, str(p))


def write_json(wl: Workload, path: str | Path) -> None:
    """Write a workload in JSON form (one node per line, so diffs stay readable)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    doc = workload_to_json(wl)
    ranks = doc.pop("ranks")
    head = json.dumps(doc)[:-1]
    parts = [head, ', "ranks": [\n']
    for i, r in enumerate(ranks):
        nodes = r.pop("nodes")
        parts.append(json.dumps(r)[:-1] + ', "nodes": [\n')
        parts.append(",\n".join(json.dumps(n) for n in nodes))
        parts.append("\n]}" + (",\n" if i + 1 < len(ranks) else "\n"))
    parts.append("]}\n")
    p.write_text("".join(parts))
