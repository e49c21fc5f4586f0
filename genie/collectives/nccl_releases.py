"""NCCL's tuning constants by release: what changed in ``src/graph/tuning.cc`` from 2.18.1 on.

``genie.collectives.nccl_model`` carries NCCL 2.30.7's constants (``ncclTunerConstantsDefaults``
and the tables before it). Published runs used older releases, whose tuner priced some steps
otherwise and so chose otherwise. This module lists every constant the model uses that changed
between releases 2.18.1 and 2.30.7 (tags ``v2.x.y-1`` of github.com/NVIDIA/nccl, read with
``git log -p -- src/graph/tuning.cc``; ``src/graph/tuning.cc`` held all of them in these
releases), each with the release that brought its present value, that release's commit and the
value it had before. ``at(release, latest)`` walks the list back from the latest constants.

Releases before 2.18.1 are outside the walk and take 2.18.1's constants (the oldest the list
holds: the nearest known, not the release's own; ``clamped``). Releases after 2.30.7 take
2.30.7's. RCCL keeps its own tuner and is not described here.

Facts only, written here from reading the diffs (no NCCL code copied); what they are:

* 2.18.3 (ea383122): a tree step with Simple 28 -> 4 us (NVLink), 6 (PCI), 14 (network);
  per-channel LL128 limits per node count (the tree's on 4+ Hopper nodes 36.7 -> 29 GB/s) and
  the Hopper tree's on 4+ nodes 33 -> 36 GB/s.
* 2.19.1 (f9c3dc25): back to 28 us for a tree step with Simple on every link; NVLS / NVLSTree's
  23 us moves from the base latency to the NVLink step (same sum on one node); NVLSTree's
  network step 19 -> 14 us; NVLS runs all-gather and reduce-scatter (before: all-reduce only).
* 2.21.5 (ab2b89c4): NVLS / NVLSTree NVLink step 23 -> 25 us; LL's one-node limit on Hopper
  87.7 -> 141 GB/s; the ring's LL rate x 1/2 where it was x 1/4 (several nodes, all-reduce,
  reduce) or x 1/3.
* 2.23.4 (68b54236): the tree with Simple gains the ring's 8.4 us base latency and its step
  falls 28 -> 4 us (NVLink, PCI) and 14 us (network); PAT arrives (all-gather and
  reduce-scatter, one GPU per node); with one GPU per node every network step is priced at the
  tree's network latency (before: the algorithm's own).
* 2.25.1 (80f6bda4): Blackwell gets its own rows (before: Hopper's, the compute-capability index
  stopping at 90) and LL128 by default (before: off on SM100).
* 2.28.3 (f1308997): Blackwell's tree limits (per channel, LL128 73.4/73.4/58 -> 55.6/31.67/20,
  Simple 77.4/82.8/72 -> 70/42.8/24 GB/s); a per-channel NVLSTree limit (before: none).
* 2.28.7 (ae7aed19): Blackwell's ring LL128 limit on 2 nodes 73.4 -> 34.6 GB/s.
* 2.28.9 (dbc86fd0): NVLSTree's network step 14 -> 20.9 us; Blackwell's NVLSTree limit on 4+
  nodes 43.1 -> 43.8 GB/s.
* 2.29.2 (ebd1e929): Blackwell's ring LL128 limit 73.4/34.6/73.4 -> 34.5/34.6/34.5 GB/s; the
  tree correction table applies to Blackwell's NVLSTree (before: the tree only).
* 2.29.7 (56a0c229, the release's tuning.cc change; tag at b91894bd): Blackwell's ring LL128
  limit -> 40 GB/s on every node count.
* 2.30.3 (b3aeda4a; tag at 6da42208): Blackwell's NVLSTree limit on 4+ nodes 43.8 -> 80 GB/s.

Not in the list (the model does not use them, or prices them its own way): CollNet's constants;
the tuner's own ring step count (2 nodes vs 2 (nodes - 1) network steps, 2.23.4: the model
counts the ring's critical path, ``nccl_model.ring_steps``); NVLS and NVLSTree's algorithm
bandwidth ratios and ``nvlsEfficiency`` (2.28.3: the model prices NVLS by what the switch's
reduction delivers); the ring LL128's x 0.7 with one GPU per node before 2.23.4 (the model
leaves the tuner's ring LL128 factor out); NVLSTree's latency over more than 2 nodes before
2.19.1 (2 (nodes - 1) network steps where the model counts the tree's depth); Blackwell's
channel count (16 CTAs from 2.28.3, the caller's ``System.channels``); ``src/enqueue.cc``'s
point-to-point LL rule: 16 KiB per operation up to 2.21.5 and from 2.29.2 (per channel, and a
peer's first channel takes up to half a chunk), but from 2.22.3 to 2.28.9 16 KiB times the
channels a peer may use (``p2pnChannelsPerPeer``, which the model does not know; no published
row is an all-to-all or send/recv that small on those releases).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from genie.errors import CollectiveError

Release = tuple[int, int, int]
#: The release whose constants ``nccl_model`` carries, and the oldest the list below reaches.
LATEST: Release = (2, 30, 7)
EARLIEST: Release = (2, 18, 1)

Triple = tuple[float, float, float]


@dataclass(frozen=True)
class Constants:
    """The tuner constants the model uses, as one NCCL release has them (us, GB/s)."""

    release: Release
    base: dict[str, Triple]  # base latency per algorithm (LL, LL128, Simple)
    hw: dict[str, dict[str, Triple]]  # per step: link class -> algorithm -> protocols
    ll_max_one_node: dict[str, float]  # LL's limit on one node per generation
    ring_ll128: dict[str, Triple]  # per channel, 1 / 2 / more nodes
    tree_ll128: dict[str, Triple]
    tree: dict[str, Triple]
    nvlstree: dict[str, tuple[float | None, float | None, float | None]]  # None: no limit
    #: the ring's LL rate as a share of the link: (several nodes, all-reduce or reduce; else)
    ring_ll_factor: tuple[float, float] = (0.5, 0.5)
    pat: bool = True  # PAT offered (2.23.4)
    nvls_gather: bool = True  # NVLS offered for all-gather and reduce-scatter (2.19.1)
    ppn1_tree_net_latency: bool = True  # one GPU per node: the tree's network step (2.23.4)
    blackwell_rows: bool = True  # Blackwell's own rows and LL128 by default (2.25.1)
    nvlstree_correction: bool = True  # the tree correction on Blackwell's NVLSTree (2.29.2)
    clamped: bool = False  # the release asked for is older than EARLIEST
    notes: tuple[str, ...] = field(default=())

    def row(self, tuning: str) -> str:
        """The generation whose rows the release prices ``tuning`` with (before 2.25.1 a
        Blackwell GPU took Hopper's)."""
        return "hopper" if tuning == "blackwell" and not self.blackwell_rows else tuning


@dataclass(frozen=True)
class Change:
    """One constant's value before ``release`` (the first release with its present value)."""

    release: Release
    commit: str  # NVIDIA/nccl commit that brought it to src/graph/tuning.cc
    table: str  # a field of Constants
    key: tuple[Any, ...]  # where in it: e.g. ("net", "tree", 2); () for a flag
    before: Any  # the value in the releases before ``release``


_LL, _LL128, _SIMPLE = 0, 1, 2


def _c(release: Release, commit: str, table: str, key: tuple[Any, ...], before: Any) -> Change:
    return Change(release, commit, table, key, before)


#: Newest first. Each value is the one in force *before* the release named.
CHANGES: tuple[Change, ...] = (
    _c((2, 30, 3), "b3aeda4a", "nvlstree", ("blackwell", 2), 43.8),
    _c((2, 29, 7), "56a0c229", "ring_ll128", ("blackwell", 0), 34.5),
    _c((2, 29, 7), "56a0c229", "ring_ll128", ("blackwell", 1), 34.6),
    _c((2, 29, 7), "56a0c229", "ring_ll128", ("blackwell", 2), 34.5),
    _c((2, 29, 2), "ebd1e929", "ring_ll128", ("blackwell", 0), 73.4),
    _c((2, 29, 2), "ebd1e929", "ring_ll128", ("blackwell", 2), 73.4),
    _c((2, 29, 2), "ebd1e929", "nvlstree_correction", (), False),
    _c((2, 28, 9), "dbc86fd0", "hw", ("net", "nvlstree", _SIMPLE), 14.0),
    _c((2, 28, 9), "dbc86fd0", "nvlstree", ("blackwell", 2), 43.1),
    _c((2, 28, 7), "ae7aed19", "ring_ll128", ("blackwell", 1), 73.4),
    _c((2, 28, 3), "f1308997", "tree_ll128", ("blackwell",), (73.4, 73.4, 58.0)),
    _c((2, 28, 3), "f1308997", "tree", ("blackwell",), (77.4, 82.8, 72.0)),
    _c((2, 28, 3), "f1308997", "nvlstree", ("hopper",), (None, None, None)),
    _c((2, 28, 3), "f1308997", "nvlstree", ("blackwell",), (None, None, None)),
    _c((2, 25, 1), "80f6bda4", "blackwell_rows", (), False),
    _c((2, 23, 4), "68b54236", "base", ("tree", _SIMPLE), 0.0),
    _c((2, 23, 4), "68b54236", "hw", ("nvlink", "tree", _SIMPLE), 28.0),
    _c((2, 23, 4), "68b54236", "hw", ("pci", "tree", _SIMPLE), 28.0),
    _c((2, 23, 4), "68b54236", "hw", ("net", "tree", _SIMPLE), 28.0),
    _c((2, 23, 4), "68b54236", "pat", (), False),
    _c((2, 23, 4), "68b54236", "ppn1_tree_net_latency", (), False),
    _c((2, 21, 5), "ab2b89c4", "hw", ("nvlink", "nvls", _SIMPLE), 23.0),
    _c((2, 21, 5), "ab2b89c4", "hw", ("nvlink", "nvlstree", _SIMPLE), 23.0),
    _c((2, 21, 5), "ab2b89c4", "ll_max_one_node", ("hopper",), 87.7),
    _c((2, 21, 5), "ab2b89c4", "ring_ll_factor", (), (1 / 4, 1 / 3)),
    _c((2, 19, 1), "f9c3dc25", "base", ("nvls", _SIMPLE), 23.0),
    _c((2, 19, 1), "f9c3dc25", "base", ("nvlstree", _SIMPLE), 23.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("nvlink", "nvls", _SIMPLE), 0.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("nvlink", "nvlstree", _SIMPLE), 0.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("nvlink", "tree", _SIMPLE), 4.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("pci", "tree", _SIMPLE), 6.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("net", "tree", _SIMPLE), 14.0),
    _c((2, 19, 1), "f9c3dc25", "hw", ("net", "nvlstree", _SIMPLE), 19.0),
    _c((2, 19, 1), "f9c3dc25", "nvls_gather", (), False),
    _c((2, 18, 3), "ea383122", "hw", ("nvlink", "tree", _SIMPLE), 28.0),
    _c((2, 18, 3), "ea383122", "hw", ("pci", "tree", _SIMPLE), 28.0),
    _c((2, 18, 3), "ea383122", "hw", ("net", "tree", _SIMPLE), 28.0),
    _c((2, 18, 3), "ea383122", "tree_ll128", ("hopper", 2), 36.7),
    _c((2, 18, 3), "ea383122", "tree", ("hopper", 2), 33.0),
)


def parse_release(text: str) -> Release:
    """``2.21.5`` (also ``v2.21.5-1``, ``2.28.9+cuda13.1``) as (2, 21, 5)."""
    m = re.fullmatch(r"\s*v?(\d+)\.(\d+)\.(\d+)(?:-\d+)?(?:\+\S*)?\s*", str(text))
    if not m:
        raise CollectiveError(f"NCCL release {text!r}: write it as 2.x.y (e.g. 2.21.5)")
    major, minor, patch = (int(g) for g in m.groups())
    if major != 2:
        raise CollectiveError(f"NCCL release {text!r}: only NCCL 2.x releases are known")
    return major, minor, patch


def release_text(release: Release) -> str:
    """(2, 21, 5) as ``2.21.5``."""
    return ".".join(str(x) for x in release)


def _set(value: Any, key: tuple[Any, ...], before: Any) -> Any:
    """``value`` (nested dicts and tuples) with ``key`` replaced by ``before``, copied."""
    if not key:
        return before
    head, rest = key[0], key[1:]
    if isinstance(value, dict):
        out = dict(value)
        out[head] = _set(value[head], rest, before)
        return out
    items = list(value)
    items[head] = _set(items[head], rest, before)
    return tuple(items)


def at(release: Release | None, latest: Constants) -> Constants:
    """``latest`` (LATEST's constants) as ``release`` had them; None: the latest."""
    if release is None or release >= latest.release:
        return latest
    target = max(release, EARLIEST)
    out = latest
    for ch in CHANGES:  # newest first: each later (older) change overwrites
        if ch.release > target:
            value = _set(getattr(out, ch.table), ch.key, ch.before)
            out = replace(out, **{ch.table: value})
    return replace(out, release=release, clamped=release < EARLIEST)
