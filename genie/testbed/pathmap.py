"""A lab fabric's path map: which switches the bytes between two hosts cross, as the user (or
the switches' per-port counters) says the fabric routes them.

genie cannot ask a lab fabric's switches how they hash each flow, as it does a netns fabric's
(``genie.testbed.flows``); a testbed names a path map in ``[routing] paths = "FILE"`` (relative
to the testbed file) and the model prices the host pairs it lists on those paths instead of its
own ECMP hash (``Topology.with_observed_paths``), saying so in its notes. The file is TOML::

    source = "port counters of leaf0/leaf1, one 4 MiB all-to-all"   # optional: where it comes from
    [[pair]]
    from = "h0"                 # the sending host (a NIC endpoint where hosts have several)
    to = "h2"
    # the switches each of the pair's flows crosses, one list per flow: equal shares of its bytes
    paths = [["leaf0", "spine0", "leaf1"], ["leaf0", "spine1", "leaf1"]]
    reverse = true              # the same switches backwards carry h2 -> h0 (the default)

A pair listed twice, a node the testbed does not have, or two consecutive nodes with no link
between them is an error naming the file and the pair.
"""

from __future__ import annotations

import itertools
import tomllib
from pathlib import Path
from typing import Any

from genie.errors import TestbedError, TopologyError

LinkPath = tuple[int, ...]
KEYS = {"from", "to", "paths", "reverse"}


def _error(file: str, where: str, message: str) -> TestbedError:
    return TestbedError(f"path map {file}: {where}: {message}")


def read_path_map(file: str) -> dict[str, Any]:
    """The TOML document of path map ``file`` (a TestbedError if it cannot be read)."""
    try:
        return tomllib.loads(Path(file).read_text())
    except OSError as exc:
        raise TestbedError(f"path map {file}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise TestbedError(f"path map {file}: not TOML: {exc}") from None


def load_path_map(file: str, topology: Any) -> tuple[dict[tuple[int, int], list[LinkPath]], str]:
    """(host pair -> the link-id path of each of its flows, where the map comes from)."""
    doc = read_path_map(file)
    unknown = set(doc) - {"source", "pair"}
    if unknown:
        raise _error(file, "top level", f"unknown keys {', '.join(sorted(unknown))}")
    source = doc.get("source", "")
    if not isinstance(source, str):
        raise _error(file, "source", "must be a string")
    pairs = doc.get("pair", [])
    if not isinstance(pairs, list) or not all(isinstance(p, dict) for p in pairs):
        raise _error(file, "pair", "must be an array of tables ([[pair]])")
    link_id = {(lk.src, lk.dst): i for i, lk in enumerate(topology.links)}
    out: dict[tuple[int, int], list[LinkPath]] = {}
    for k, entry in enumerate(pairs, 1):
        where = f"pair {k}"
        extra = set(entry) - KEYS
        if extra:
            raise _error(file, where, f"unknown keys {', '.join(sorted(extra))}")
        a, b, flows = entry.get("from"), entry.get("to"), entry.get("paths")
        if not isinstance(a, str) or not isinstance(b, str):
            raise _error(file, where, "from and to must name hosts")
        where = f"pair {k} ({a} -> {b})"
        if not isinstance(flows, list) or not flows:
            raise _error(file, where, "paths must be a non-empty list of lists of switches")
        reverse = entry.get("reverse", True)
        if not isinstance(reverse, bool):
            raise _error(file, where, "reverse must be true or false")
        try:
            ends = (topology.host_index(a), topology.host_index(b))
        except TopologyError as exc:
            raise _error(file, where, str(exc)) from None
        ways = [(ends, 1), ((ends[1], ends[0]), -1)] if reverse else [(ends, 1)]
        for key, step in ways:
            if key in out:
                raise _error(file, where, "this pair (or its reverse) is listed twice")
            out[key] = []
            for via in flows:
                if not isinstance(via, list) or not all(isinstance(s, str) for s in via):
                    raise _error(file, where, f"a path must be a list of switch names: {via!r}")
                nodes = [a, *via, b][::step]
                hops = list(itertools.pairwise(nodes))
                missing = [f"{u}->{v}" for u, v in hops if (u, v) not in link_id]
                if missing:
                    raise _error(file, where, f"no link {missing[0]} in the testbed")
                out[key].append(tuple(link_id[h] for h in hops))
    return out, source
