"""What ``simulate`` says about a trace's stream semantics and whether the network can matter.

``semantics_facts`` adds to the trace facts of ``genie simulate --json``: the edges the stream
rules added (``genie.workload.stream_rules``, by rule) under ``--trace-edges``, and the reason the
network cannot matter (``genie.sim.independence``), which is also logged as a warning, so it
shows before the numbers. ``semantics_notes`` turns both into report notes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from genie.sim.independence import network_cannot_matter
from genie.workload.stream_rules import edge_lines, summarize_edges

if TYPE_CHECKING:
    from genie.sim.compiled import CompiledWorkload
    from genie.workload.model import Workload

log = logging.getLogger(__name__)


def semantics_facts(wl: Workload, cw: CompiledWorkload, mode: str) -> dict[str, object]:
    """The stream rules' edges (``mode`` inferred) and why the network cannot matter, if so."""
    edges = summarize_edges(wl.ranks) if mode == "inferred" else None
    why = network_cannot_matter(cw)
    if why:
        log.warning(why)
    return {"trace_edges": mode, "stream_rules": edges, "network_cannot_matter": why}


def semantics_notes(facts: dict[str, object]) -> list[str]:
    """Report notes for ``semantics_facts`` (none when there is nothing to say)."""
    notes: list[str] = []
    edges = facts.get("stream_rules")
    if isinstance(edges, dict):
        notes += edge_lines(edges)
    why = facts.get("network_cannot_matter")
    if why:
        notes.append(f"warning: {why}")
    return notes
