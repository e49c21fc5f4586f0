"""An Ansible inventory (YAML) written from a testbed and its deploy settings.

Groups: ``genie_agents`` (every host), ``genie_rdma`` (hosts with an RDMA device or on an RDMA
testbed). Host variables carry SSH access (``ansible_host``, ``ansible_port``, ``ansible_user``,
``ansible_ssh_private_key_file``) and what the roles need (``genie_agent_id``, ``genie_listen``,
``genie_data_addr``, ``genie_nic``, ``genie_rdma_device``, ``genie_mtu``, ``genie_ranks``, and
on a multi-NIC host ``genie_nics``: each NIC's interface and MTU, all tuned by the role).
Scalars are written as JSON, which YAML reads as the same values.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from genie.deploy.config import DeployConfig
from genie.testbed import Host, Testbed


def host_mtu(testbed: Testbed, name: str) -> int | None:
    """The largest MTU of the links that touch host ``name``, any of its NICs (None if it has
    no links)."""
    ends = set(testbed.host(name).endpoints())
    mtus = [lk.mtu for lk in testbed.links if lk.a in ends or lk.b in ends]
    return max(mtus) if mtus else None


def host_vars(testbed: Testbed, cfg: DeployConfig, host: Host) -> dict[str, Any]:
    """The inventory variables of one host."""
    a = cfg.hosts[host.name]
    out: dict[str, Any] = {"ansible_host": a.ssh_host, "ansible_port": a.port}
    if a.user:
        out["ansible_user"] = a.user
    if a.key:
        out["ansible_ssh_private_key_file"] = a.key
    if a.python != "python3":
        out["ansible_python_interpreter"] = a.python
    out.update(
        genie_agent_id=host.name,
        genie_listen=host.control,
        genie_data_addr=",".join(host.nic_addrs()),  # one per NIC
        genie_ranks=host.ranks,
        genie_remote_root=a.remote_root,
    )
    if cfg.keys:  # a path on the controller; the role copies only the public keys and own pair
        out["genie_keys"] = os.path.abspath(cfg.keys)
    if host.nic:
        out["genie_nic"] = host.nic
    if host.rdma_device:
        out["genie_rdma_device"] = host.rdma_device
    mtu = host_mtu(testbed, host.name)
    if mtu:
        out["genie_mtu"] = mtu
    nics = [(k, n) for k, n in enumerate(host.nics) if n.device]
    if nics:  # every data NIC of a multi-NIC host, for the tuning role (MTU, IRQ affinity)
        out["genie_nics"] = [_nic_vars(testbed, host.endpoint(k), n.device) for k, n in nics]
    return out


def _nic_vars(testbed: Testbed, endpoint: str, device: str | None) -> dict[str, Any]:
    """One NIC's entry of ``genie_nics``: its interface and the largest MTU of its links."""
    mtus = [lk.mtu for lk in testbed.links if endpoint in (lk.a, lk.b)]
    return {"name": device, **({"mtu": max(mtus)} if mtus else {})}


def inventory_data(testbed: Testbed, cfg: DeployConfig) -> dict[str, Any]:
    """The inventory as nested dicts (what ``ansible-inventory --list`` would show, grouped)."""
    agents = {h.name: host_vars(testbed, cfg, h) for h in testbed.hosts}
    rdma = [h.name for h in testbed.hosts if h.rdma_device or testbed.transport == "rdma"]
    return {
        "all": {
            "vars": {
                "genie_testbed": testbed.name,
                "genie_transport": testbed.transport,
                "genie_heartbeat": cfg.heartbeat,
                "genie_missed_beats": testbed.missed_beats,
            },
            "children": {
                "genie_agents": {"hosts": agents},
                "genie_rdma": {"hosts": {n: None for n in rdma}},
            },
        }
    }


def _yaml(node: Any, indent: int) -> list[str]:
    pad = "  " * indent
    lines: list[str] = []
    for key, value in node.items():
        k = json.dumps(str(key))
        if isinstance(value, dict):
            if value:
                lines.append(f"{pad}{k}:")
                lines.extend(_yaml(value, indent + 1))
            else:
                lines.append(f"{pad}{k}: {{}}")
        else:
            lines.append(f"{pad}{k}: {json.dumps(value)}")
    return lines


def dumps_inventory(testbed: Testbed, cfg: DeployConfig, source: str = "") -> str:
    """The inventory as YAML text."""
    head = f"# Ansible inventory written by `genie deploy` from {source or testbed.name}\n"
    return head + "\n".join(_yaml(inventory_data(testbed, cfg), 0)) + "\n"


def write_inventory(testbed: Testbed, cfg: DeployConfig, out: str | Path, source: str = "") -> Path:
    """Write the inventory YAML to ``out``; return its path."""
    p = Path(out)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(dumps_inventory(testbed, cfg, source))
    return p
