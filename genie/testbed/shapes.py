"""Topology shorthands (star, leafspine, ring, rail) expanded into hosts, switches and links.

Each takes a template Link whose rate, MTU, queue limit and latency every made link copies.
"""

from __future__ import annotations

from msgspec.structs import replace

from genie.testbed.model import Link


class Expanded:
    """The result of expanding a shorthand: host names, switch names, links."""

    def __init__(
        self, hosts: list[str], switches: list[str], links: list[Link], nics: int = 1
    ) -> None:
        self.hosts = hosts
        self.switches = switches
        self.links = links
        self.nics = nics  # NICs per host (links then name "<host>.nic<k>")


def star(host_names: list[str], template: Link, switch: str = "sw0") -> Expanded:
    """N hosts each linked to one switch."""
    links = [replace(template, a=h, b=switch) for h in host_names]
    return Expanded(list(host_names), [switch], links)


def ring(host_names: list[str], template: Link) -> Expanded:
    """N hosts linked in a cycle, host i to host i+1 (two hosts: one link)."""
    n = len(host_names)
    pairs = [(i, (i + 1) % n) for i in range(n if n > 2 else n - 1)]
    links = [replace(template, a=host_names[i], b=host_names[j]) for i, j in pairs]
    return Expanded(list(host_names), [], links)


def leafspine_uplink_rate(
    hosts_per_leaf: int, spines: int, rate: float, oversubscription: float
) -> float:
    """Rate of each leaf-to-spine link: host capacity of a leaf / (oversubscription x spines)."""
    return hosts_per_leaf * rate / (oversubscription * spines)


def leafspine(
    host_names: list[str], leaves: int, spines: int, template: Link, uplink_rate: float
) -> Expanded:
    """L leaves with len(host_names)/L hosts each, every leaf linked to every spine."""
    per_leaf = len(host_names) // leaves
    leaf_names = [f"leaf{i}" for i in range(leaves)]
    spine_names = [f"spine{i}" for i in range(spines)]
    links: list[Link] = []
    for li, leaf in enumerate(leaf_names):
        for h in host_names[li * per_leaf : (li + 1) * per_leaf]:
            links.append(replace(template, a=h, b=leaf))
    for leaf in leaf_names:
        for spine in spine_names:
            links.append(replace(template, a=leaf, b=spine, rate=uplink_rate))
    return Expanded(list(host_names), leaf_names + spine_names, links)


def rail(
    host_names: list[str],
    rails: int,
    spines: int,
    template: Link,
    uplink_rate: float,
    hosts_per_leaf: int | None = None,
) -> Expanded:
    """Rail-optimised leaf-spine: every host has ``rails`` NICs, NIC k on rail leaf k.

    Hosts come in groups of ``hosts_per_leaf`` (default: all of them); each group has its own
    ``rails`` leaves (``leaf<g*rails+k>``), and every leaf is linked to every spine, so NIC k of
    one host reaches NIC k of a host in its group in one switch hop, and any other NIC over a
    spine.
    """
    per = hosts_per_leaf or len(host_names)
    groups = len(host_names) // per
    leaf_names = [f"leaf{i}" for i in range(groups * rails)]
    spine_names = [f"spine{i}" for i in range(spines)]
    links: list[Link] = []
    for g in range(groups):
        for h in host_names[g * per : (g + 1) * per]:
            for k in range(rails):
                links.append(replace(template, a=f"{h}.nic{k}", b=leaf_names[g * rails + k]))
    for leaf in leaf_names:
        for spine in spine_names:
            links.append(replace(template, a=leaf, b=spine, rate=uplink_rate))
    return Expanded(list(host_names), leaf_names + spine_names, links, nics=rails)
