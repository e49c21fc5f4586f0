"""A testbed of N agents on this machine's loopback interface (for ``genie cluster local``)."""

from __future__ import annotations

from genie.errors import TestbedError
from genie.testbed import shapes
from genie.testbed.model import Host, Link, Switch, Testbed

LOOPBACK_BASE_PORT = 7700
LOOPBACK_NOMINAL_RATE = 10e9 / 8  # bytes/s; loopback is not shaped, this only feeds the model


def loopback_testbed(
    n_agents: int, base_port: int = LOOPBACK_BASE_PORT, ranks_per_host: int = 1
) -> Testbed:
    """N hosts on 127.0.0.1 listening on ports base_port, base_port + 1, ... behind one switch."""
    if n_agents < 1:
        raise TestbedError(f"loopback testbed needs at least 1 agent, got {n_agents}")
    if not 1 <= base_port <= 65535 - n_agents + 1:
        raise TestbedError(f"loopback ports {base_port}..{base_port + n_agents - 1} out of range")
    names = [f"h{i}" for i in range(n_agents)]
    hosts = [
        Host(
            name=n,
            control=f"127.0.0.1:{base_port + i}",
            data_addr="127.0.0.1",
            ranks=ranks_per_host,
        )
        for i, n in enumerate(names)
    ]
    template = Link(a="", b="", rate=LOOPBACK_NOMINAL_RATE, mtu=65535)
    ex = shapes.star(names, template) if n_agents > 1 else None
    return Testbed(
        name=f"loopback{n_agents}",
        kind="static",
        transport="tcp",
        hosts=hosts,
        switches=[Switch(name=s) for s in ex.switches] if ex else [],
        links=ex.links if ex else [],
    )
