"""A testbed of N agents on this machine's loopback interface (for ``genie cluster local``)."""

from __future__ import annotations

from genie.errors import TestbedError
from genie.testbed import shapes
from genie.testbed.model import Host, Link, Switch, Testbed

LOOPBACK_BASE_PORT = 7700
LOOPBACK_NOMINAL_RATE = 10e9 / 8  # bytes/s; loopback is not shaped, this only feeds the model
NOMINAL_NOTE = (
    "nominal 10 Gbit/s links with no latency: NOT this machine's loopback (unshaped; its real "
    "rate and per-message cost are what `genie cluster local` probes)"
)


def loopback_testbed(
    n_agents: int,
    base_port: int = LOOPBACK_BASE_PORT,
    ranks_per_host: int = 1,
    *,
    rate: float = LOOPBACK_NOMINAL_RATE,
    latency: float = 0.0,
    model: str = NOMINAL_NOTE,
) -> Testbed:
    """N hosts on 127.0.0.1 listening on ports base_port, base_port + 1, ... behind one switch.

    ``rate`` (bytes/s) and ``latency`` (s per link; a message crosses two) feed the cost model
    only; ``model`` says where they come from.
    """
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
    template = Link(a="", b="", rate=rate, mtu=65535, latency=latency)
    ex = shapes.star(names, template) if n_agents > 1 else None
    return Testbed(
        name=f"loopback{n_agents}",
        kind="static",
        transport="tcp",
        hosts=hosts,
        switches=[Switch(name=s) for s in ex.switches] if ex else [],
        links=ex.links if ex else [],
        model=model,
    )
