"""Process-group membership from the places traces keep it.

* PyTorch's ``## process_group:init ##`` record, which Chakra's converter turns into a
  METADATA node whose ``inputs.values`` is the Python ``str()`` of a one-element list holding
  PyTorch's JSON list of groups: ``['[{"pg_name": "0", "pg_desc": "default_pg", "ranks": [0, 1,
  ...]}, ...]']``. ``ranks: []`` means every rank (as ASTRA-sim reads it).
* ASTRA-sim's comm-group JSON file: ``{"<pg_name>": [global ranks]}``.
* genie's own ``pg_ranks:<pg_name>`` GlobalMetadata attrs (``genie.workload.loader``).

Every parser here takes untrusted text: sizes are bounded, and anything malformed is a
WorkloadError of one line naming the file and node.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

from genie.errors import WorkloadError
from genie.workload.model import NodeType, RankGraph

#: Longest process_group:init text parsed (bytes of text); real ones are a few KiB.
MAX_PG_TEXT = 16 * 2**20
#: pg_name that ASTRA-sim (and PyTorch's default group) takes as every rank when undefined.
WORLD_PG_NAME = "0"


def _loads(text: str) -> Any:
    """JSON, or a Python literal (what ``str()`` of a list of strings gives)."""
    try:
        return json.loads(text)
    except ValueError:
        return ast.literal_eval(text)


def parse_pg_init(
    text: str, n_ranks: int, where: str, desc: dict[str, str] | None = None
) -> dict[str, tuple[int, ...]]:
    """Groups described by one process_group:init node's ``inputs.values``.

    Readable names (``pg_desc``, unless empty or ``undefined``) are added to ``desc``.
    """
    if len(text) > MAX_PG_TEXT:
        raise WorkloadError(f"{where}: process_group:init text is over {MAX_PG_TEXT} bytes")
    try:
        obj = _loads(text)
        for _ in range(3):  # unwrap ['<json>'] and '<json>' layers
            if isinstance(obj, list) and len(obj) == 1 and isinstance(obj[0], str):
                obj = obj[0]
            if isinstance(obj, str):
                obj = _loads(obj)
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError) as exc:
        raise WorkloadError(
            f"{where}: process_group:init values are not a JSON list of groups "
            f"({type(exc).__name__})"
        ) from None
    if not isinstance(obj, list) or not all(isinstance(g, dict) for g in obj):
        raise WorkloadError(f"{where}: process_group:init values are not a list of groups")
    groups: dict[str, tuple[int, ...]] = {}
    for g in obj:
        name, ranks = g.get("pg_name"), g.get("ranks", [])
        if type(name) is int:
            name = str(name)
        if type(name) is not str or not isinstance(ranks, list):
            raise WorkloadError(f"{where}: process group entry {str(g)[:80]} lacks pg_name/ranks")
        if not all(type(r) is int for r in ranks):
            raise WorkloadError(f"{where}: process group {name!r} has non-integer ranks")
        groups[name] = tuple(ranks) if ranks else tuple(range(n_ranks))
        d = g.get("pg_desc")
        if desc is not None and isinstance(d, str) and d and d != "undefined":
            desc[name] = d[:200]
    return groups


def groups_from_pg_nodes(
    ranks: list[RankGraph], n_ranks: int | None = None, desc: dict[str, str] | None = None
) -> dict[str, tuple[int, ...]]:
    """Groups of every rank's process_group:init METADATA nodes; ranks must agree.

    ``ranks: []`` becomes every one of ``n_ranks`` (default: as many as ``ranks``); readable
    names go into ``desc`` when given.
    """
    out: dict[str, tuple[int, ...]] = {}
    seen_in: dict[str, str] = {}
    meta = NodeType.METADATA_NODE
    n = len(ranks) if n_ranks is None else n_ranks
    for rg in ranks:
        for node in rg.nodes:
            if node.type != meta or node.inputs is None or not node.inputs.values:
                continue
            where = f"rank {rg.rank} ({rg.source}) node {node.label()}"
            for name, members in parse_pg_init(node.inputs.values, n, where, desc).items():
                if name in out and out[name] != members:
                    raise WorkloadError(
                        f"{where}: process group {name!r} is {list(members)} here but "
                        f"{list(out[name])} in {seen_in[name]}"
                    )
                out[name] = members
                seen_in[name] = where
    return out


def read_comm_group_file(path: str | Path) -> dict[str, tuple[int, ...]]:
    """ASTRA-sim's comm-group JSON: ``{"<pg_name>": [global ranks]}``."""
    f = Path(path)
    try:
        raw = json.loads(f.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{f}: not a readable comm-group JSON file: {exc}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(type(x) is int for x in v) for v in raw.values()
    ):
        raise WorkloadError(f'{f}: expected {{"<pg_name>": [ranks...]}}')
    return {str(k): tuple(v) for k, v in raw.items()}
