"""A run's stored NIC and stack counters, per size or op and per agent, as people read them.

The store keeps one row per Go, agent and source (``RunStore.counters``); here they are grouped
by what the Go ran: a collective at one size (bench, and emulate's isolated collectives: every
Go of that size together) or one iteration of a trace (emulate's op lists: each Go is one,
warm-up first, numbered from 0 like the instances). Per group and agent the deltas of all its
sources are summed by name (``genie.wire.counters.merge``) and said in one phrase
("iteration 7: 1,240 CNPs sent and 18 ms of pause on h3"); ``genie runs show``, ``genie
report`` and ``genie runs compare`` print these. Pure: rows in, dicts and text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from genie.units import format_bytes
from genie.wire.counters import headline, summary

MAX_LINES = 40  # lines of counters ``runs show`` prints (then how many more)


@dataclass
class CounterGroup:
    """The counters of one size or iteration of a run, per agent (deltas summed by name)."""

    label: str  # "all_reduce/ring n=4 1 MiB" or "iteration 7"
    key: tuple[str, str, int, int] | None  # (collective, algorithm, ranks, size); None: op list
    iteration: int | None  # the op-list iteration (None for a size)
    goes: int = 0
    iterations: int = 0  # iterations its Goes ran, warm-up included
    agents: dict[str, dict[str, int]] = field(default_factory=dict)
    sources: dict[str, list[str]] = field(default_factory=dict)  # agent -> its sources
    # agent -> per Go and source of a long Go, how its counters grew: {go, source, samples}
    samples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def total(self) -> dict[str, int]:
        """Deltas summed over agents."""
        out: dict[str, int] = {}
        for d in self.agents.values():
            for k, v in d.items():
                out[k] = out.get(k, 0) + v
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: label, key, goes, iterations, per agent its headline and all deltas."""
        return {
            "label": self.label,
            "collective": self.key[0] if self.key else None,
            "algorithm": self.key[1] if self.key else None,
            "n_ranks": self.key[2] if self.key else None,
            "size": self.key[3] if self.key else None,
            "iteration": self.iteration,
            "goes": self.goes,
            "iterations": self.iterations,
            "agents": {
                a: {
                    "sources": self.sources.get(a, []),
                    "headline": headline(d),
                    "deltas": d,
                    **({"samples": self.samples[a]} if self.samples.get(a) else {}),
                }
                for a, d in sorted(self.agents.items())
            },
        }


def group_counters(rows: Iterable[Mapping[str, Any]]) -> list[CounterGroup]:
    """Stored counter rows (``RunStore.counters``, in Go order) grouped by size or iteration."""
    groups: dict[object, CounterGroup] = {}
    seen_goes: dict[object, set[int]] = {}
    op_goes: dict[int, int] = {}  # go -> its iteration among the op-list Goes
    for r in rows:
        go = int(r["go"])
        if r.get("collective") is None:
            it = op_goes.setdefault(go, len(op_goes))
            gkey: object = ("iteration", it)
            if gkey not in groups:
                groups[gkey] = CounterGroup(f"iteration {it}", None, it)
        else:
            key = (str(r["collective"]), str(r["algorithm"]), int(r["n_ranks"]), int(r["size"]))
            gkey = key
            if gkey not in groups:
                label = f"{key[0]}/{key[1]} n={key[2]} {format_bytes(key[3])}"
                groups[gkey] = CounterGroup(label, key, None)
        g = groups[gkey]
        if go not in seen_goes.setdefault(gkey, set()):
            seen_goes[gkey].add(go)
            g.goes += 1
            g.iterations += int(r["iterations"])
        agent = str(r["agent"])
        mine = g.agents.setdefault(agent, {})
        for k, v in r["deltas"].items():
            mine[k] = mine.get(k, 0) + int(v)
        srcs = g.sources.setdefault(agent, [])
        if r["source"] not in srcs:
            srcs.append(str(r["source"]))
        if r.get("samples"):
            g.samples.setdefault(agent, []).append(
                {"go": go, "source": str(r["source"]), "samples": r["samples"]}
            )
    return list(groups.values())


def group_lines(groups: Sequence[CounterGroup], limit: int = MAX_LINES) -> list[str]:
    """One line per size or iteration and agent where a headline counter moved ("iteration 7:
    1,240 CNPs sent and 18 ms of pause on h3"); at most ``limit`` lines, then one saying how
    many more."""
    lines = []
    for g in groups:
        its = f" ({g.iterations} iterations)" if g.iteration is None else ""
        for agent, d in sorted(g.agents.items()):
            said = summary(d)
            if said:
                lines.append(f"{g.label}{its}: {said} on {agent}")
    if len(lines) > limit:
        more = len(lines) - limit
        lines = [*lines[:limit], f"... {more} more (--json has them all)"]
    return lines


def sources_line(groups: Sequence[CounterGroup]) -> str:
    """Which counters were read where ("rdma:mlx5_0/1, ethtool:eth2 on h0; tcp on h1")."""
    where: dict[str, list[str]] = {}
    for g in groups:
        for a, srcs in g.sources.items():
            mine = where.setdefault(a, [])
            mine.extend(s for s in srcs if s not in mine)
    return "; ".join(f"{', '.join(s)} on {a}" for a, s in sorted(where.items()))


def table_rows(groups: Sequence[CounterGroup]) -> tuple[list[str], list[list[str]]]:
    """(head, rows) of a small table: per size or iteration and agent, the headline figures
    (columns: the labels any row has, in ``HEADLINE`` order)."""
    cols: list[str] = []
    body: list[tuple[str, str, dict[str, int]]] = []
    for g in groups:
        for agent, d in sorted(g.agents.items()):
            h = headline(d)
            body.append((g.label, agent, h))
            cols.extend(k for k in h if k not in cols)
    rows = [
        [label, agent, *(f"{h[c]:,}" if c in h else "-" for c in cols)] for label, agent, h in body
    ]
    return ["size or iteration", "agent", *cols], rows


def compare_counters(a: Sequence[CounterGroup], b: Sequence[CounterGroup]) -> list[dict[str, Any]]:
    """Per size or iteration both runs have: each headline figure per iteration (summed over
    agents) in A and in B."""
    bl = {g.label: g for g in b}
    out = []
    for ga in a:
        gb = bl.get(ga.label)
        if gb is None:
            continue
        ha, hb = headline(ga.total()), headline(gb.total())
        for label in [k for k in ha if k in hb] + [k for k in hb if k not in ha]:
            va = ha.get(label)
            vb = hb.get(label)
            out.append(
                {
                    "what": ga.label,
                    "counter": label,
                    "a_per_iteration": None if va is None else va / max(1, ga.iterations),
                    "b_per_iteration": None if vb is None else vb / max(1, gb.iterations),
                }
            )
    return out
