"""The conditions a run ran under, as stored with it, flattened and compared.

A run's meta keeps, per agent, the ``WireConditions`` its data connections reported (what was in
force: congestion control, socket buffers, MSS, the namespace's TCP sysctls, MTU, qdisc and
segmentation offload limits of its data NIC, kernel; on RDMA runs, per verbs device, the queue
pairs per connection and the traffic class of the queue pairs). ``flatten`` turns that into one
``name -> value`` map (a value the agents agree on once; where they differ, each agent's);
``differences`` says in words which conditions two runs do not share, the check behind
``genie runs compare`` and ``genie calibrate``.
"""

from __future__ import annotations

from collections.abc import Mapping

IGNORED = ("tcp_allowed_congestion_control", "tcp_available_congestion_control")
LABELS = {
    "congestion": "congestion control of the data sockets",
    "sndbuf": "SO_SNDBUF (bytes)",
    "rcvbuf": "SO_RCVBUF (bytes)",
    "mss": "TCP MSS (bytes)",
}
NIC_LABELS = {
    "mtu": "MTU of the data NIC (bytes)",
    "qdisc": "qdisc of the data NIC",
    "gso_max_size": "GSO packets of the data NIC at most (bytes)",
    "gso_max_segs": "GSO packets of the data NIC at most (segments)",
    "tso_max_size": "TSO packets of the data NIC at most (bytes)",
    "gro_max_size": "GRO packets of the data NIC at most (bytes)",
    # an RDMA job's devices (genie_agent.dataplane.rdma_conn.rdma_conditions)
    "rdma_qps": "RDMA queue pairs per connection",
    "rdma_traffic_class": "RDMA traffic class (GRH)",
}


def _values(cond: Mapping[str, object]) -> dict[str, str]:
    """One agent's conditions as ``name -> value`` strings."""
    out: dict[str, str] = {}
    for key, label in LABELS.items():
        v = cond.get(key)
        if isinstance(v, list) and v:
            out[label] = ",".join(str(x) for x in v)
    kernel = cond.get("kernel")
    if isinstance(kernel, str) and kernel:
        out["kernel"] = kernel
    sysctl = cond.get("sysctl")
    if isinstance(sysctl, Mapping):
        for k, v in sysctl.items():
            if k not in IGNORED and v:
                default = " (the host's default)" if k == "tcp_congestion_control" else ""
                out[f"net.ipv4.{k}{default}"] = str(v)
    nics = cond.get("nics")
    if isinstance(nics, Mapping):
        for attrs in nics.values():
            if isinstance(attrs, Mapping):
                for k, v in attrs.items():
                    if v:
                        out[NIC_LABELS.get(k, f"{k} of the data NIC")] = str(v)
    return out


Conditions = Mapping[str, Mapping[str, object]]  # agent -> its WireConditions as plain data


def conditions_of(meta: Mapping[str, object]) -> Conditions:
    """The per-agent conditions a run's stored meta carries ({} for runs that recorded none)."""
    got = meta.get("conditions")
    if not isinstance(got, Mapping):
        return {}
    return {str(a): c for a, c in got.items() if isinstance(c, Mapping)}


def flatten(conditions: Conditions) -> dict[str, str]:
    """``name -> value`` over every agent: one value where they agree, else ``agent=value``."""
    per = {a: _values(c) for a, c in conditions.items()}
    names = sorted({k for v in per.values() for k in v})
    out: dict[str, str] = {}
    for name in names:
        seen = {a: v[name] for a, v in per.items() if name in v}
        vals = set(seen.values())
        one = vals.pop() if len(vals) == 1 else None
        out[name] = (
            one if one is not None else ", ".join(f"{a}={x}" for a, x in sorted(seen.items()))
        )
    return out


def differences(a: Conditions, b: Conditions) -> list[str]:
    """The conditions runs ``a`` and ``b`` do not share, one phrase each ("" in none)."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for name in sorted(set(fa) | set(fb)):
        va, vb = fa.get(name, "?"), fb.get(name, "?")
        if va != vb:
            out.append(f"{name}: {va} vs {vb}")
    return out
