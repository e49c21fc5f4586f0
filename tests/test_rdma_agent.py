"""RDMA on this host for real: the pyverbs import, and the no-device path with agent processes.

The import is tested wherever a pyverbs exists (the distro's python3-pyverbs, seen through the
fallback or a --system-site-packages venv); the no-device test runs real agents and needs a
host without RDMA devices (the CI machine's kernel has none).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from genie.collectives import build_program
from genie.controller.local import LocalCluster, open_controller
from genie.errors import RuntimeFault, TransportError
from genie.wire.messages import DataOptions, RdmaOptions
from genie_agent.dataplane.rdma_conn import SOFTROCE_HINT, SYS_IB, find_devices

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DISTRO_PYVERBS = "/usr/lib/python3/dist-packages/pyverbs"


def _has_pyverbs() -> str:
    """Why pyverbs cannot be tested here ("" if it can)."""
    from genie_agent.dataplane.rdma import load_pyverbs

    try:
        load_pyverbs()
    except TransportError as exc:
        return f"load_pyverbs failed: {exc}"
    return ""


@pytest.mark.skipif(bool(_has_pyverbs()), reason=_has_pyverbs() or "-")
def test_pyverbs_imports_with_its_enums_and_finds_no_device_here() -> None:
    from genie_agent.dataplane.rdma import load_pyverbs

    pv = load_pyverbs()
    e = pv.enums
    assert pv.enums.__name__ in ("pyverbs.enums", "pyverbs.libibverbs_enums")
    # the constants the verbs layer uses exist and have the verbs ABI values
    assert (e.IBV_QPT_RC, e.IBV_QPS_INIT, e.IBV_QPS_RTR, e.IBV_QPS_RTS) == (2, 1, 2, 3)
    assert e.IBV_WR_RDMA_WRITE_WITH_IMM == 1 and e.IBV_WR_SEND_WITH_IMM == 3
    assert e.IBV_WC_RECV_RDMA_WITH_IMM == 129 and e.IBV_WC_REM_ACCESS_ERR == 10
    for name in ("QP", "QPAttr", "QPInitAttr", "QPCap"):
        assert hasattr(pv.qp, name)
    if not find_devices():
        with pytest.raises(pv.errors):
            pv.device.get_device_list()  # libibverbs itself agrees: no device here


@pytest.mark.skipif(
    not os.path.isdir(DISTRO_PYVERBS), reason=f"{DISTRO_PYVERBS} absent (apt python3-pyverbs)"
)
def test_system_python_imports_distro_pyverbs_through_the_shim() -> None:
    """/usr/bin/python3 (the distro's own) imports pyverbs the way a system-site venv would."""
    code = (
        "import importlib, sys\n"
        "try:\n"
        "    e = importlib.import_module('pyverbs.libibverbs_enums')\n"
        "except ImportError:\n"
        "    e = importlib.import_module('pyverbs.enums')\n"
        "import pyverbs.qp, pyverbs.cq, pyverbs.mr, pyverbs.wr, pyverbs.addr, pyverbs.device\n"
        "print(e.__name__, e.IBV_QPT_RC, pyverbs.__file__)\n"
    )
    out = subprocess.run(
        ["/usr/bin/python3", "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    name, rc, path = out.stdout.split()
    assert name in ("pyverbs.enums", "pyverbs.libibverbs_enums") and rc == "2"
    assert path.startswith("/usr/lib/python3/dist-packages/pyverbs")


def test_missing_pyverbs_is_one_line_with_the_install_hint(tmp_path) -> None:
    code = (
        "import sys; sys.modules['pyverbs'] = None\n"  # as if nothing is installed
        "from genie_agent.dataplane.rdma import load_pyverbs\n"
        "from genie.errors import TransportError\n"
        f"try:\n    load_pyverbs(paths=({str(tmp_path)!r},))\n"
        "except TransportError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
        check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip()
    assert "\n" not in line and line.startswith("pyverbs cannot be imported")
    assert "apt-get install python3-pyverbs" in line and "'rdma' extra" in line


@pytest.mark.skipif(bool(find_devices()), reason=f"{SYS_IB} lists RDMA devices on this host")
def test_rdma_without_device_fails_prepare_in_one_line_and_agents_stay_up() -> None:
    with LocalCluster.start(2, heartbeat_s=0.2) as cl:
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            prog = build_program("all_reduce", "ring", 2, 64 * 1024)
            with pytest.raises(RuntimeFault) as info:
                ctl.prepare(
                    [prog],
                    ["h0", "h1"],
                    DataOptions(transport="rdma", rdma=RdmaOptions(mode="write_imm")),
                )
            msg = str(info.value)
            assert "\n" not in msg
            assert "no RDMA device found" in msg and SOFTROCE_HINT in msg
            assert f"{SYS_IB} does not exist" in msg or f"{SYS_IB} is empty" in msg
        finally:
            ctl.close()
            ctl.t.close()
        # the agents are still up and idle: the same program runs over TCP right after (a new
        # controller: replies to the first one's abort may still be on their way to it)
        assert all(p.poll() is None for p in cl.procs)
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            ctl.prepare([prog], ["h0", "h1"], DataOptions(transport="tcp"))
            out = ctl.run(iters=2, warmup=0)
            ctl.release()
            assert len(out.instances) == 2 and all(x.time_s > 0 for x in out.instances)
        finally:
            ctl.close()
            ctl.t.close()


@pytest.mark.skipif(bool(find_devices()), reason=f"{SYS_IB} lists RDMA devices on this host")
def test_unknown_transport_and_bad_mode_are_refused_at_prepare() -> None:
    with LocalCluster.start(2, heartbeat_s=0.2) as cl:
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            prog = build_program("all_reduce", "ring", 2, 4096)
            with pytest.raises(RuntimeFault, match="transport 'udp'; use tcp or rdma"):
                ctl.prepare([prog], ["h0", "h1"], DataOptions(transport="udp"))
        finally:
            ctl.close()
            ctl.t.close()
        ctl = open_controller(cl.testbed)
        try:
            ctl.connect()
            bad = DataOptions(transport="rdma", rdma=RdmaOptions(mode="read"))
            with pytest.raises(RuntimeFault, match="RDMA mode 'read'"):
                ctl.prepare([prog], ["h0", "h1"], bad)
        finally:
            ctl.close()
            ctl.t.close()
