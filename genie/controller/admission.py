"""Admission of a plan across hosts: the agents that share a machine share its memory.

Each agent's hello says how much memory its host may still give (``HostFacts.memory_available``)
and which machine it is on (``HostFacts.host_id``: the running kernel). ``check_memory`` adds up
what a plan needs of every agent on one machine (a local cluster's agents, a netns testbed's, the
agents of one lab server) and refuses the plan in one line, before any agent allocates, where
that sum exceeds ``HEADROOM`` of the machine's available memory. Pure: facts in, error out.
``one_at_a_time`` is what a sweep of programs prepared one per job needs of each agent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from genie.collectives.program import Program
from genie.errors import AdmissionError
from genie.wire.messages import HostFacts

HEADROOM = 0.9  # plan at most this share of what a host has available (the rest: the OS, genie)
GIB = float(1 << 30)


def _gib(n: float) -> str:
    return f"{n / GIB:.3g} GiB"


def machines(facts: Mapping[str, HostFacts]) -> dict[str, list[str]]:
    """Agents grouped by the machine they run on (an agent of unknown machine: alone)."""
    out: dict[str, list[str]] = {}
    for agent in sorted(facts):
        key = facts[agent].host_id or f"agent:{agent}"
        out.setdefault(key, []).append(agent)
    return out


def one_at_a_time(programs: Sequence[Program], placement: Sequence[str]) -> dict[str, int]:
    """Bytes each agent holds at most when ``programs`` are prepared one at a time (a bench
    sweep: one size per job): per program, the buffers and scratch of the agent's ranks
    (``Program.footprint``); the largest program counts. ``placement``: global rank -> agent."""
    out: dict[str, int] = {}
    for prog in programs:
        ranks = prog.spec.ranks or tuple(range(prog.spec.n_ranks))
        per: dict[str, int] = {}
        for i, rank in enumerate(ranks):
            agent = placement[rank]
            per[agent] = per.get(agent, 0) + sum(prog.footprint(i))
        for agent, n in per.items():
            out[agent] = max(out.get(agent, 0), n)
    return out


def check_memory(
    needs: Mapping[str, int], facts: Mapping[str, HostFacts], headroom: float = HEADROOM
) -> None:
    """Refuse (AdmissionError, one line) a plan whose agents on one machine need more than
    ``headroom`` of its available memory; ``needs``: agent -> bytes it may hold at once.

    A machine whose agents do not report their available memory (older agents) is not checked.
    """
    short: list[str] = []
    for agents in machines(facts).values():
        need = sum(int(needs.get(a, 0)) for a in agents)
        known = [facts[a].memory_available for a in agents if facts[a].memory_available > 0]
        if need <= 0 or not known:
            continue
        avail = min(known)  # the one read last is the freshest, but every one is a bound
        if need <= headroom * avail:
            continue
        using = [a for a in agents if needs.get(a, 0) > 0]
        host = facts[agents[0]].hostname or agents[0]
        short.append(
            f"the plan needs {_gib(need)} on host {host} (agent{'s' if len(using) > 1 else ''} "
            f"{', '.join(using)}), {_gib(avail)} available"
        )
    if short:
        raise AdmissionError(
            f"{'; '.join(short)} (GiB = 2^30 bytes; a plan may use {headroom:.0%} of what a host "
            "has available): place fewer ranks on that host, run smaller collectives, or free "
            "memory there"
        )
