"""Run the RDMA preflight: on a lab host over SSH, or against a recorded tree here (no SSH).

The facts come from ``rdma_probe`` (shipped as source and run by the host's Python, or called
here on a tree), the rules from ``rdma_checks``. A host the probe cannot run on is one failed
row, not an error.

The traffic priority PFC and ECN must cover: ``--priority``, else the one genie's own queue
pairs land on when the testbed sets ``[rdma] traffic_class`` (under the common DSCP trust
mapping, DSCP = traffic_class >> 2 and priority = DSCP >> 3, so priority = traffic_class >> 5),
else ``rdma_checks``' own choice (NCCL_IB_TC of the host, else 3).
"""

from __future__ import annotations

from pathlib import Path

from genie.deploy import rdma_probe
from genie.deploy.check import Check
from genie.deploy.rdma_checks import NicWant, evaluate_rdma, wants_of
from genie.deploy.ssh import Remote
from genie.errors import DeployError, UsageError
from genie.testbed import Host, Testbed


def probe_source() -> str:
    """The source of the RDMA probe script (stdlib only)."""
    return Path(rdma_probe.__file__).read_text()


def preflight_remote(
    remote: Remote, testbed: Testbed, host: Host, priority: int | None = None
) -> list[Check]:
    """The preflight of ``host`` over an open SSH connection."""
    a = remote.access
    try:
        facts = remote.run_python(a.python, probe_source(), ["/"], f"{a.name}: rdma probe")
    except DeployError as exc:
        return [Check("rdma preflight", "fail", str(exc).removeprefix(f"{a.name}: "), "")]
    if not isinstance(facts, dict):
        return [Check("rdma preflight", "fail", "the RDMA probe returned no facts", "")]
    prio, rows = genie_priority(testbed, priority)
    return rows + evaluate_rdma(facts, wants_of(testbed, host), prio)


def genie_priority(testbed: Testbed | None, priority: int | None) -> tuple[int | None, list[Check]]:
    """The priority to check (``priority``, else the testbed's traffic class's, else None: the
    rules' default) and a row saying so where the testbed sets a traffic class."""
    tc = testbed.rdma.traffic_class if testbed is not None else None
    if tc is None:
        return priority, []
    mine = tc >> 5  # DSCP = tc >> 2; priority = DSCP >> 3 (DSCP trust)
    sends = f"genie's queue pairs send traffic class {tc} ([rdma] traffic_class): DSCP {tc >> 2}"
    if priority is None:
        return mine, [Check("rdma priority", "ok", f"{mine}: {sends} -> priority {mine}", "")]
    if priority == mine:
        return priority, []
    return priority, [
        Check(
            "rdma priority",
            "warn",
            f"checked {priority} (--priority); {sends} -> priority {mine}",
            f"traffic_class = {priority * 32 + 10} in the testbed's [rdma] (DSCP "
            f"{priority * 8 + 2} -> priority {priority}), or --priority {mine}",
        )
    ]


def preflight_tree(
    root: str | Path,
    testbed: Testbed | None = None,
    host: Host | None = None,
    priority: int | None = None,
) -> list[Check]:
    """The preflight against a recorded tree ``root`` (a host's ``/`` copied: sys, proc, etc,
    genie-tools; ``/`` is this machine, tools run); with a testbed host, against its NICs, else
    every RDMA device in the tree."""
    path = Path(root)
    if not path.is_dir():
        raise UsageError(f"--sysfs-root {root}: not a directory")
    facts = rdma_probe.gather(str(path))  # live (tools run) only for this machine's own /
    wants: list[NicWant] = wants_of(testbed, host) if testbed and host else []
    prio, rows = genie_priority(testbed, priority)
    return rows + evaluate_rdma(facts, wants, prio)
