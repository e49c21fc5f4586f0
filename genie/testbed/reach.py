"""Before anything connects to a netns testbed: is it up on this host, reached by its own links?

A netns testbed's agents listen on 198.19.x.y, addresses genie owns only while the testbed is up.
When it is down, the host's default route would carry a controller's connection attempts off the
machine, to addresses that are not genie's; when another testbed is up with overlapping blocks,
they would reach the wrong agents. So a controller first checks, for every host: its namespace
exists, its root-side control link (``genie-<tag>c<i>``) exists in this network namespace, is
up and holds the root-side address, and the kernel's route to the agent leaves by that link.
Any miss is refused at once, naming it and the ``genie testbed up`` command to run; nothing is
sent. The links found are returned, and the controller binds each connection to its link.

``overlaps`` is the check ``testbed up`` makes: root-side addresses of a new testbed already
held by an interface of this namespace (another testbed's).
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections.abc import Sequence

from genie.errors import TestbedDown
from genie.testbed import addressing
from genie.testbed.model import Testbed
from genie.testbed.netns import Runner, list_namespaces, run_command, tools_missing


def _addresses(runner: Runner) -> dict[str, tuple[set[str], list[str]]]:
    """ifname -> (flags, IPv4 addresses with prefix) of this network namespace."""
    res = runner(["ip", "-j", "addr", "show"], None)
    if res.returncode != 0:
        raise TestbedDown(f"`ip -j addr show` failed: {res.stderr.strip()}")
    out = {}
    for e in json.loads(res.stdout or "[]"):
        addrs = [
            f"{a['local']}/{a['prefixlen']}"
            for a in e.get("addr_info", [])
            if a.get("family") == "inet"
        ]
        out[e.get("ifname", "")] = (set(e.get("flags", [])), addrs)
    return out


def _routes(ips: Sequence[str], runner: Runner) -> list[str]:
    """The device the kernel routes each of ``ips`` by ("" where there is no route)."""
    script = "".join(f"route get {ip}\n" for ip in ips)
    res = runner(["ip", "-j", "-batch", "-"], script)
    devs = []
    for line in res.stdout.splitlines():
        try:
            entries = json.loads(line)
        except json.JSONDecodeError:
            continue
        devs.append(entries[0].get("dev", "") if entries else "")
    return devs + [""] * (len(ips) - len(devs))


def control_links(tb: Testbed, source: str = "", runner: Runner = run_command) -> dict[str, str]:
    """host -> the root-side link its agent is reached by; TestbedDown (nothing sent) if not up."""
    up = f"run `sudo genie testbed up {shlex.quote(source) if source else 'FILE'} --agents`"
    missing = tools_missing() if runner is run_command else []
    if missing:
        raise TestbedDown(f"cannot check testbed {tb.name}: {', '.join(missing)} not installed")
    namespaces = set(list_namespaces(runner, tb.netns_prefix))
    addrs = _addresses(runner)
    links: dict[str, str] = {}
    for i, h in enumerate(tb.hosts):
        ifname = addressing.root_control_ifname(tb.netns_prefix, i)
        root_ip = addressing.control_pair(i, tb.netns_prefix)[0]
        where = f"testbed {tb.name} is not up on this host"
        if h.netns not in namespaces:
            raise TestbedDown(f"{where}: no namespace {h.netns} (host {h.name}); {up}")
        if ifname not in addrs:
            raise TestbedDown(
                f"{where}: no control link {ifname} for host {h.name} in this network "
                f"namespace; {up}"
            )
        flags, have = addrs[ifname]
        if f"{root_ip}/{addressing.CONTROL_PREFIXLEN}" not in have:
            raise TestbedDown(
                f"{where}: control link {ifname} of host {h.name} lacks {root_ip} (it has "
                f"{', '.join(have) or 'no address'}: another testbed's?); {up}"
            )
        if "UP" not in flags or "LOWER_UP" not in flags:
            raise TestbedDown(f"{where}: control link {ifname} of host {h.name} is down; {up}")
        links[h.name] = ifname
    ips = [h.control_ip for h in tb.hosts]
    for h, ip, dev in zip(tb.hosts, ips, _routes(ips, runner), strict=True):
        if dev != links[h.name]:
            raise TestbedDown(
                f"testbed {tb.name}: the route to host {h.name}'s agent {ip} leaves by "
                f"{dev or 'no interface'}, not its link {links[h.name]} (another testbed with "
                f"overlapping addresses?); refusing to connect"
            )
    return links


def overlaps(tb: Testbed, runner: Runner = run_command) -> list[str]:
    """Root-side control addresses of ``tb`` an interface here already holds: "IP on IF"."""
    mine = {
        ipaddress.ip_network(f"{addressing.control_pair(i, tb.netns_prefix)[0]}/30", strict=False)
        for i in range(len(tb.hosts))
    }
    out = []
    for ifname, (_flags, have) in sorted(_addresses(runner).items()):
        for cidr in have:
            net = ipaddress.ip_interface(cidr).network
            if any(net.overlaps(m) for m in mine):
                out.append(f"{cidr} on {ifname}")
    return out
