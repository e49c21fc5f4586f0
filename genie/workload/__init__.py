"""Chakra execution-trace workloads: the ET codec, the per-rank graph model, generators.

Public API: ``load_workload``, ``save_workload``, ``Workload``, ``RankGraph``, ``Node``,
``NodeKind``, ``NodeType``, ``CollectiveType``, ``Attr``, ``validate_workload``, ``summarize``.
Process-group conventions are described in ``genie.workload.loader``.
"""

from genie.workload.graph import critical_path, topological_order
from genie.workload.loader import load_workload, save_workload
from genie.workload.model import (
    Attr,
    CollectiveType,
    IOInfo,
    Metadata,
    Node,
    NodeKind,
    NodeType,
    RankGraph,
    Workload,
)
from genie.workload.summary import summarize
from genie.workload.validate import validate_workload

__all__ = [
    "Attr",
    "CollectiveType",
    "IOInfo",
    "Metadata",
    "Node",
    "NodeKind",
    "NodeType",
    "RankGraph",
    "Workload",
    "critical_path",
    "load_workload",
    "save_workload",
    "summarize",
    "topological_order",
    "validate_workload",
]
