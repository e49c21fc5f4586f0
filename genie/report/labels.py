"""Names of configurations in a report, built from what differs between them.

A simulate or emulate document (``--json``) is described by named facts (``doc_facts``): the
workload, the testbed or the fabric (topology, hosts, the hosts' link rate, oversubscription,
routing), the collective model, calibration, dilation. Several configurations in one figure are
labelled by the facts that differ (``distinct_labels``); the facts they share go to the title.
Facts come from the document's ``configuration`` (``genie simulate`` writes it) and, for older
documents, from its one-line ``network`` description.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

Facts = dict[str, str]

#: fact -> how it reads in a label ("{}" is the value); in this order
PHRASES = {
    "workload": "{}",
    "testbed": "on {}",
    "topology": "{}",
    "hosts": "{} hosts",
    "host links": "hosts at {}",
    "links": "links {}",
    "oversubscription": "{} oversubscribed",
    "routing": "{} routing",
    "collective model": "{} model",
    "algorithm": "algorithm {}",
    "calibration": "calibration {}",
    "mode": "{}",
    "dilation": "dilation x{}",
    "backend": "{}",
}
_TOPOLOGY = re.compile(r"(\w+) topology: (\d+) hosts")
_RATE = re.compile(r"([\d.]+) GB/s")


def _rates(network: str) -> str:
    """The distinct link rates of a network description: ``12.5, 25 GB/s``."""
    head = network.split("; intra-host")[0]
    part = head.split("links ", 1)[1] if "links " in head else ""
    vals: list[str] = []
    for m in _RATE.finditer(part.split(";")[0]):
        v = f"{float(m.group(1)):g}"
        if v not in vals:
            vals.append(v)
    return f"{', '.join(vals)} GB/s" if vals else ""


def _routing(network: str, given: Any) -> str:
    """The routing the model priced: ECMP, spray or pinned ("" where paths cannot differ)."""
    low = network.lower()
    if "routing ecmp" in low:
        return "ECMP"
    if "spraying" in low:
        return "spray"
    if "routing pinned" in low or given == "pinned":
        return "pinned"
    return {"ecmp": "ECMP", "spray": "spray"}.get(str(given), "")


def _model(network: str, cfg: dict[str, Any]) -> str:
    """The collective model: NCCL-like, line-rate, an ASTRA-sim backend."""
    if cfg.get("collective_model"):
        return str(cfg["collective_model"])
    if "NCCL-like" in network:
        return "NCCL-like"
    if "priced by" in network or "topology:" in network:
        return "line-rate"
    return ""


def _ratio(v: Any) -> str:
    return f"{float(v):g}:1" if isinstance(v, int | float) else str(v or "")


def doc_facts(doc: dict[str, Any]) -> Facts:
    """What a simulate/emulate document ran, as named facts (empty facts left out)."""
    cfg = doc.get("configuration") or {}
    net = str(doc.get("network") or "")
    reports = doc.get("reports") or [{}]
    out: Facts = {"workload": str(doc.get("workload") or reports[0].get("workload", "workload"))}
    testbed = doc.get("testbed") or cfg.get("testbed")
    kind = _TOPOLOGY.search(net)
    if testbed:
        out["testbed"] = str(testbed)
    else:
        out["topology"] = kind.group(1) if kind else str(cfg.get("topology") or "network")
        if kind:
            out["hosts"] = kind.group(2)
        bw = cfg.get("host_bandwidth_Bps")
        if isinstance(bw, int | float):
            out["host links"] = f"{bw / 1e9:.4g} GB/s"
        elif _rates(net):
            out["links"] = _rates(net)
        if out["topology"] not in ("star", "switch") and cfg.get("oversubscription") is not None:
            out["oversubscription"] = _ratio(cfg["oversubscription"])
    out["routing"] = _routing(net, cfg.get("routing"))
    out["collective model"] = _model(net, cfg)
    for key, value in (
        ("algorithm", cfg.get("algorithm")),
        ("calibration", cfg.get("calibration") or doc.get("calibration")),
    ):
        if value not in (None, "", "none"):
            out[key] = str(value)
    if doc.get("mode"):
        out["mode"] = str(doc["mode"])
    if doc.get("dilation") not in (None, 1, 1.0):
        out["dilation"] = f"{float(doc['dilation']):g}"
    return {k: v for k, v in out.items() if v}


def phrase(facts: Facts, keys: Sequence[str] | None = None) -> str:
    """Facts as one phrase in ``PHRASES`` order: ``gpt, leaf_spine, 2:1 oversubscribed``."""
    ks = [k for k in PHRASES if k in facts and (keys is None or k in keys)]
    return ", ".join(PHRASES[k].format(facts[k]) for k in ks)


def config_phrase(facts: Facts) -> str:
    """One configuration in full: ``gpt on leaf_spine, 8 hosts, hosts at 12.5 GB/s, ...``."""
    rest = {k: v for k, v in facts.items() if k != "workload"}
    if "testbed" in rest:
        head = f"{facts.get('workload', 'workload')} on {rest.pop('testbed')}"
    else:
        head = f"{facts.get('workload', 'workload')} on {rest.pop('topology', 'network')}"
    tail = phrase(rest)
    return f"{head}, {tail}" if tail else head


def distinct_labels(
    facts: Sequence[Facts], sources: Sequence[str] | None = None
) -> tuple[list[str], str]:
    """A label per configuration naming what differs between them, and what they share.

    Configurations alike in every fact are told apart by ``sources`` (their files) or their
    position, so no two labels are ever the same."""
    keys = [k for k in PHRASES if any(k in f for f in facts)]
    differ = [k for k in keys if len({f.get(k, "-") for f in facts}) > 1]
    same = [k for k in keys if k not in differ]
    shared = phrase(facts[0], same) if facts else ""
    labels = [phrase(f, differ) if differ else "" for f in facts]
    for i, lab in enumerate(labels):
        if not lab or labels.count(lab) > 1:
            tag = sources[i].rsplit("/", 1)[-1] if sources else f"#{i + 1}"
            labels[i] = f"{lab} ({tag})" if lab else tag
    seen: dict[str, int] = {}
    for i, lab in enumerate(labels):  # the same file given twice: by position
        seen[lab] = seen.get(lab, 0) + 1
        if labels.count(lab) > 1:
            labels[i] = f"{lab} #{seen[lab]}"
    return labels, shared
