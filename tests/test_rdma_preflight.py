"""The RDMA preflight on recorded trees: a healthy ConnectX-class RoCE host passes, each fault is
reported with its fix (rules and CLI), soft-RoCE is told apart, and a malformed tree is a finding.

Trees follow the kernel's sysfs layout (Documentation/ABI/stable/sysfs-class-infiniband: ports/N/
state, phys_state, link_layer, rate, gids/I, gid_attrs/types/I and ndevs/I; fw_ver, hca_type,
board_id; device/net/IF) plus recorded tool outputs under genie-tools/.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from genie.cli import main
from genie.deploy import rdma_probe
from genie.deploy.rdma_checks import NicWant, evaluate_rdma, roce_mtu
from genie.deploy.rdma_preflight import preflight_tree, probe_source

IP = "192.168.100.10"
MAC_GID = "fe80:0000:0000:0000:0e42:a1ff:fe2b:3c4d"
IP_GID = "0000:0000:0000:0000:0000:ffff:c0a8:640a"  # ::ffff:192.168.100.10
ZERO_GID = "0000:0000:0000:0000:0000:0000:0000:0000"

DEVINFO = """hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t16.35.2000
\tvendor_id:\t\t\t0x02c9
\tvendor_part_id:\t\t\t4119
\tboard_id:\t\t\tMT_0000000012
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tactive_mtu:\t\t{active} (5)
\t\t\tsm_lid:\t\t\t0
\t\t\tport_lid:\t\t0
\t\t\tlink_layer:\t\tEthernet
\t\t\tGID[  0]:\t\tfe80::e42:a1ff:fe2b:3c4d, RoCE v1
\t\t\tGID[  1]:\t\tfe80::e42:a1ff:fe2b:3c4d, RoCE v2
\t\t\tGID[  3]:\t\t::ffff:192.168.100.10, RoCE v2
"""

MLNX_QOS = """DCBX mode: OS controlled
Priority trust state: dscp
Cable len: 7
PFC configuration:
\tpriority    0   1   2   3   4   5   6   7
\tenabled     {pfc}
tc: 0 ratelimit: unlimited, tsa: vendor
\t priority:  0
"""

LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max locked memory         {soft}              {hard}              bytes
Max address space         unlimited            unlimited            bytes
"""

TESTBED = """
[testbed]
name = "lab"
kind = "static"
transport = "rdma"
[topology]
shape = "star"
rate = "100gbit"
mtu = 4200
[[hosts]]
name = "n0"
control = "10.0.0.10:7000"
data_addr = "{ip}"
nic = "ens1f0"
[[hosts]]
name = "n1"
control = "10.0.0.11:7000"
data_addr = "192.168.100.11"
nic = "ens1f0"
"""


def _w(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text if text.endswith("\n") else text + "\n")


def connectx(root: Path, **fault: object) -> Path:
    """A recorded ConnectX-5 RoCE host (mlx5_0 on ens1f0, 192.168.100.10), healthy unless
    ``fault`` changes one thing."""
    ib = "sys/class/infiniband/mlx5_0"
    for name, val in (
        ("fw_ver", "16.35.2000"),
        ("hca_type", "MT4119"),
        ("board_id", "MT_0000000012"),
        ("node_type", "1: CA"),
    ):
        _w(root, f"{ib}/{name}", val)
    (root / ib / "device/net/ens1f0").mkdir(parents=True)
    drivers = root / "sys/bus/pci/drivers/mlx5_core"
    drivers.mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/mlx5_core", root / ib / "device/driver")
    port = f"{ib}/ports/1"
    _w(root, f"{port}/state", str(fault.get("state", "4: ACTIVE")))
    _w(root, f"{port}/phys_state", str(fault.get("phys_state", "5: LinkUp")))
    _w(root, f"{port}/link_layer", "Ethernet")
    _w(root, f"{port}/rate", "100 Gb/sec (4X EDR)")
    v2 = "IB/RoCE v1" if fault.get("v1_only") else "RoCE v2"
    table = [
        (MAC_GID, "IB/RoCE v1"),
        (MAC_GID, v2),
        (IP_GID, "IB/RoCE v1"),
        (IP_GID, v2),
    ]
    for i in range(8):  # the kernel lists every slot; empty ones read as zeros
        gid, typ = table[i] if i < len(table) else (ZERO_GID, None)
        _w(root, f"{port}/gids/{i}", gid)
        if typ:
            _w(root, f"{port}/gid_attrs/types/{i}", typ)
            _w(root, f"{port}/gid_attrs/ndevs/{i}", "ens1f0")
    net = "sys/class/net/ens1f0"
    _w(root, f"{net}/mtu", str(fault.get("mtu", 4200)))
    _w(root, f"{net}/operstate", "up")
    for point in ("roce_np", "roce_rp"):
        for p in range(8):
            off = fault.get("ecn_off") == point and p == 3
            _w(root, f"{net}/ecn/{point}/enable/{p}", "0" if off else "1")
    pfc = fault.get("pfc", "0   0   0   1   0   0   0   0")
    _w(root, "genie-tools/mlnx_qos-ens1f0.txt", MLNX_QOS.format(pfc=pfc))
    _w(root, "genie-tools/ibv_devinfo.txt", DEVINFO.format(active=fault.get("active_mtu", 4096)))
    soft = fault.get("memlock", "unlimited")
    _w(root, "proc/self/limits", LIMITS.format(soft=soft, hard=soft))
    _w(root, "etc/nccl.conf", f"# lab\nNCCL_IB_GID_INDEX={fault.get('gid_index', 3)}\n"
       "NCCL_IB_TC=106\n")  # fmt: skip
    return root


def soft_roce(root: Path) -> Path:
    """A soft-RoCE device (rdma link add genie-rxe0 type rxe netdev veth0): no bus device."""
    ib = "sys/class/infiniband/genie-rxe0"
    _w(root, f"{ib}/node_type", "1: CA")
    _w(root, f"{ib}/fw_ver", "0.0.0")
    port = f"{ib}/ports/1"
    _w(root, f"{port}/state", "4: ACTIVE")
    _w(root, f"{port}/phys_state", "5: LinkUp")
    _w(root, f"{port}/link_layer", "Ethernet")
    _w(root, f"{port}/rate", "10 Gb/sec (1X QDR)")
    for i, (gid, typ) in enumerate(
        [(MAC_GID, "IB/RoCE v1"), (MAC_GID, "RoCE v2"), (IP_GID, "IB/RoCE v1"),
         (IP_GID, "RoCE v2")]
    ):  # fmt: skip
        _w(root, f"{port}/gids/{i}", gid)
        _w(root, f"{port}/gid_attrs/types/{i}", typ)
        _w(root, f"{port}/gid_attrs/ndevs/{i}", "veth0")
    _w(root, "sys/class/net/veth0/mtu", "1500")
    _w(root, "sys/class/net/veth0/operstate", "up")
    _w(root, "genie-tools/ibv_devinfo.txt", "hca_id:\tgenie-rxe0\n\t\tport:\t1\n"
       "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n\t\t\tmax_mtu:\t\t4096 (5)\n"
       "\t\t\tactive_mtu:\t\t1024 (3)\n")  # fmt: skip
    _w(root, "proc/self/limits", LIMITS.format(soft="unlimited", hard="unlimited"))
    return root


def _rows(checks) -> dict:
    return {c.name: c for c in checks}


def _failed(checks) -> dict:
    return {c.name: c for c in checks if c.status == "fail"}


def _host(tmp_path: Path, ip: str = IP):
    from genie.deploy.config import loads_deploy

    tb, _ = loads_deploy(TESTBED.format(ip=ip))
    return tb, tb.host("n0")


def test_healthy_connectx_host_passes_and_names_the_gid_index(tmp_path: Path) -> None:
    tb, host = _host(tmp_path)
    checks = preflight_tree(connectx(tmp_path), tb, host)
    rows = _rows(checks)
    assert not _failed(checks), _failed(checks)
    assert {c.status for c in checks} == {"ok"}, [c for c in checks if c.status != "ok"]
    assert rows["rdma device"].value == f"mlx5_0 (mlx5_core) -> ens1f0 -> {IP}"
    assert "NCCL_IB_GID_INDEX=3" in rows["rdma gid mlx5_0/1"].value
    assert rows["rdma nccl gid mlx5_0/1"].value.startswith("NCCL_IB_GID_INDEX=3 (/etc/nccl.conf)")
    assert rows["rdma port mlx5_0/1"].value == "ACTIVE, LinkUp, Ethernet, 100 Gb/sec (4X EDR)"
    assert rows["rdma mtu mlx5_0/1"].value == "active 4096, ens1f0 MTU 4200"
    assert rows["rdma pfc ens1f0"].value.startswith("priority 3 on (enabled: 3; trust dscp)")
    assert rows["rdma ecn ens1f0"].value == "priority 3: roce_np 1, roce_rp 1"
    assert rows["rdma firmware mlx5_0"].value == "16.35.2000 (MT4119, MT_0000000012)"
    assert rows["rdma priority"].value.startswith("3 (NCCL_IB_TC=106")
    assert rows["memlock"].value == "unlimited (hard unlimited)"


FAULTS = [
    # (fault, the failing row, words in its value, words in its fix)
    (
        {"gid_index": 0},
        "rdma nccl gid mlx5_0/1",
        [f"is {MAC_GID} (IB/RoCE v1)", "RoCE v2 GID is 3"],
        ["NCCL_IB_GID_INDEX=3 in /etc/nccl.conf"],
    ),
    ({"v1_only": True}, "rdma gid mlx5_0/1", ["RoCE v1 only"], ["RoCE v2", "firmware"]),
    (
        {"mtu": 9000, "active_mtu": 1024},
        "rdma mtu mlx5_0/1",
        ["active MTU 1024", "ens1f0 MTU 9000 carries 4096"],
        ["ip link set dev ens1f0 mtu 9000"],
    ),
    (
        {"mtu": 1500},
        "rdma mtu mlx5_0/1",
        ["active MTU 4096 > 1024", "dropped"],
        ["ip link set dev ens1f0 mtu 4192"],
    ),
    (
        {"pfc": "1   0   0   0   0   0   0   0"},
        "rdma pfc ens1f0",
        ["priority 3 off (enabled: 0", "mlnx_qos -i ens1f0"],
        ["mlnx_qos -i ens1f0 --pfc 0,0,0,1,0,0,0,0", "prio-pfc 3:on"],
    ),
    (
        {"ecn_off": "roce_rp"},
        "rdma ecn ens1f0",
        ["roce_rp 0", "DCQCN off"],
        ["echo 1 > /sys/class/net/ens1f0/ecn/roce_rp/enable/3"],
    ),
    (
        {"ecn_off": "roce_np"},
        "rdma ecn ens1f0",
        ["roce_np 0", "no CNPs"],
        ["echo 1 > /sys/class/net/ens1f0/ecn/roce_np/enable/3"],
    ),
    (
        {"memlock": 8388608},
        "memlock",
        ["8 MiB (hard 8 MiB) < 64 MiB"],
        ["memlock unlimited", "LimitMEMLOCK=infinity"],
    ),
    (
        {"state": "1: DOWN", "phys_state": "3: Disabled"},
        "rdma port mlx5_0/1",
        ["DOWN, Disabled"],
        ["ip link set dev ens1f0 up", "phys_state Disabled"],
    ),
]


@pytest.mark.parametrize(("fault", "row", "value", "fix"), FAULTS, ids=lambda x: str(x)[:30])
def test_each_fault_is_reported_with_its_fix(tmp_path, fault, row, value, fix) -> None:
    tb, host = _host(tmp_path)
    failed = _failed(preflight_tree(connectx(tmp_path, **fault), tb, host))
    assert list(failed) == [row], failed
    for word in value:
        assert word in failed[row].value, failed[row]
    for word in fix:
        assert word in failed[row].fix, failed[row]


def test_ip_not_on_a_roce_v2_gid(tmp_path: Path) -> None:
    tb, host = _host(tmp_path, ip="192.168.100.99")
    failed = _failed(preflight_tree(connectx(tmp_path), tb, host))
    assert set(failed) == {"rdma gid mlx5_0/1"}, failed
    assert "192.168.100.99 is on no RoCE v2 GID (RoCE v2: 192.168.100.10 at 3)" in (
        failed["rdma gid mlx5_0/1"].value
    )
    assert "ip addr add" in failed["rdma gid mlx5_0/1"].fix


def test_without_a_testbed_every_device_is_checked(tmp_path: Path) -> None:
    rows = _rows(preflight_tree(connectx(tmp_path)))
    assert rows["rdma gid mlx5_0/1"].value == f"RoCE v2: {IP} at 3: NCCL_IB_GID_INDEX=3"
    v1 = _failed(preflight_tree(connectx(tmp_path / "v1", v1_only=True)))
    assert v1["rdma gid mlx5_0/1"].value == "RoCE v1 only (no RoCE v2 GID)"


def test_pfc_from_a_recorded_dcb_output_and_the_priority_option(tmp_path: Path) -> None:
    root = connectx(tmp_path)
    (root / "genie-tools/mlnx_qos-ens1f0.txt").unlink()
    _w(root, "genie-tools/dcb-pfc-ens1f0.txt", "pfc-cap 8 macsec-bypass off delay 0\n"
       "prio-pfc 0:off 1:off 2:off 3:on 4:off 5:on 6:off 7:off\n")  # fmt: skip
    rows = _rows(preflight_tree(root))
    assert rows["rdma pfc ens1f0"].status == "ok"
    assert "enabled: 3,5" in rows["rdma pfc ens1f0"].value
    five = _rows(preflight_tree(root, priority=5))
    assert five["rdma pfc ens1f0"].status == "ok"
    assert (
        five["rdma priority"].status == "warn" and "NCCL_IB_TC=106" in five["rdma priority"].value
    )
    four = _failed(preflight_tree(root, priority=4))
    assert "rdma pfc ens1f0" in four and "prio-pfc 4:on" in four["rdma pfc ens1f0"].fix
    assert "rdma ecn ens1f0" not in four  # ECN is on for every priority in this tree


def test_soft_roce_device_is_told_apart(tmp_path: Path) -> None:
    from genie.deploy.config import loads_deploy

    tb, _ = loads_deploy(TESTBED.format(ip=IP).replace('"ens1f0"', '"veth0"', 1))
    checks = preflight_tree(soft_roce(tmp_path), tb, tb.host("n0"))
    rows = _rows(checks)
    assert not _failed(checks), _failed(checks)
    assert rows["rdma device"].value == f"genie-rxe0 (soft-RoCE) -> veth0 -> {IP}"
    assert rows["rdma pfc veth0"].status == "skip" and "soft-RoCE" in rows["rdma pfc veth0"].value
    assert "rdma ecn veth0" not in rows and "rdma priority" not in rows
    assert rows["rdma firmware genie-rxe0"].status == "skip"
    # veth MTU 1500 carries RDMA MTU 1024 on rxe (80 bytes of headers): works, with a warning
    assert rows["rdma mtu genie-rxe0/1"].status == "warn"
    assert "4096 needs >= 4176" in rows["rdma mtu genie-rxe0/1"].value
    assert rows["rdma rate genie-rxe0/1"].status == "warn"  # 10 Gb/s device, 100 Gbit/s testbed


def test_no_device_and_wrong_device_name(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    failed = _failed(preflight_tree(tmp_path / "empty"))
    assert "no /sys/class/infiniband" in failed["rdma device"].value
    assert "rdma link add genie-rxe0 type rxe" in failed["rdma device"].fix
    tb, _ = _host(tmp_path)
    from genie.deploy.config import loads_deploy

    tb, _ = loads_deploy(TESTBED.format(ip=IP).replace('nic = "ens1f0"', 'nic = "ens1f0"\n'
                                                       'rdma_device = "mlx5_1"', 1))  # fmt: skip
    failed = _failed(preflight_tree(connectx(tmp_path / "cx"), tb, tb.host("n0")))
    assert failed["rdma device"].value == "mlx5_1 not in /sys/class/infiniband (have mlx5_0)"


def test_malformed_tree_gives_one_line_findings_never_a_traceback(tmp_path: Path) -> None:
    root = connectx(tmp_path)
    port = root / "sys/class/infiniband/mlx5_0/ports"
    (port / "x1").mkdir()  # not a port number
    (port / "1/gids/junk").write_text("zz\n")
    (root / "sys/class/net/ens1f0/mtu").write_text("lots\n")
    (root / "sys/class/infiniband/mlx5_0/fw_ver").write_bytes(b"\xff\xfe\x00" * 10)
    (root / "genie-tools/ibv_devinfo.txt").write_bytes(b"x" * (rdma_probe.MAX_TOOL + 10))
    (root / "proc/self/limits").write_text("Max locked memory  lots  lots  bytes\n")
    (root / "etc/nccl.conf").unlink()
    os.symlink("/dev/zero", root / "etc/nccl.conf")  # not a regular file: never read
    checks = preflight_tree(root)
    rows = _rows(checks)
    probe = rows["rdma probe"]
    assert probe.status == "warn" and "ports/x1: not a number, ignored" in probe.value
    assert "more)" in probe.value and "\n" not in probe.value
    facts = rdma_probe.gather(str(root), live=False)
    assert not [e for e in facts["errors"] if "nccl.conf" in e] and facts["nccl"] == {}
    assert rows["rdma mtu mlx5_0/1"].status == "skip"  # mtu unreadable
    assert rows["rdma firmware mlx5_0"].status == "skip"
    assert rows["memlock"].status == "skip"
    # facts of the wrong shape (from a broken remote probe) are one failed row
    bad = evaluate_rdma({"devices": [{"name": "mlx5_0"}]}, [NicWant()])
    assert [(c.name, c.status) for c in bad if c.status == "fail"] == [("rdma preflight", "fail")]
    assert "malformed facts: KeyError" in bad[-1].value


def test_cli_runs_the_preflight_on_a_tree(tmp_path: Path, capsys) -> None:
    tb = tmp_path / "lab.toml"
    tb.write_text(TESTBED.format(ip=IP))
    good = connectx(tmp_path / "good")
    assert main(["hosts", "check", "--sysfs-root", str(good), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["host"] == "(tree)" and data[0]["ok"] is True
    args = ["hosts", "check", "--sysfs-root", str(good), "--testbed", str(tb), "--hosts", "n0"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "rdma preflight of" in out and "NCCL_IB_GID_INDEX=3" in out
    bad = connectx(tmp_path / "bad", pfc="0   0   0   0   0   0   0   0", memlock=65536)
    rc = main(["hosts", "check", "--sysfs-root", str(bad), "--testbed", str(tb), "--hosts",
               "n0", "--json"])  # fmt: skip
    data = json.loads(capsys.readouterr().out)
    assert rc == 1 and data[0]["host"] == "n0" and data[0]["ok"] is False
    failed = {c["name"]: c for c in data[0]["checks"] if c["status"] == "fail"}
    assert set(failed) == {"rdma pfc ens1f0", "memlock"}
    assert "--pfc 0,0,0,1,0,0,0,0" in failed["rdma pfc ens1f0"]["fix"]
    # a tree is one host's: two hosts is a usage error (exit 2), as is no testbed nor tree
    assert main(["hosts", "check", "--sysfs-root", str(good), "--testbed", str(tb)]) == 2
    assert "name that host with --hosts H" in capsys.readouterr().err
    assert main(["hosts", "check"]) == 2
    assert main(["hosts", "check", "--sysfs-root", str(tmp_path / "nope")]) == 2
    assert main(["hosts", "check", "--sysfs-root", str(good), "--hosts", "n0"]) == 2
    assert main(["hosts", "check", "--sysfs-root", str(good), "--priority", "8"]) == 2
    assert "a priority is 0..7" in capsys.readouterr().err


def test_the_probe_is_self_contained_and_records_what_it_read(tmp_path: Path, capsys) -> None:
    src = connectx(tmp_path / "src")
    # shipped as source and run by a bare Python, as over SSH: no genie import
    code = "import sys; src = bytes.fromhex(sys.argv[1]).decode(); sys.argv = sys.argv[1:]; "
    code += "exec(compile(src, 'genie-probe', 'exec'))"
    res = subprocess.run(
        [sys.executable, "-I", "-c", code, probe_source().encode().hex(), str(src)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    facts = json.loads(res.stdout)
    assert facts["devices"][0]["name"] == "mlx5_0" and facts["live"] is False
    assert facts["devinfo"]["mlx5_0"]["1"]["active_mtu"] == 4096
    # a record of what was read, checked again, gives the same findings
    rec = tmp_path / "rec"
    assert rdma_probe.main([str(src), "--record", str(rec)]) == 0
    assert json.loads(capsys.readouterr().out)["devices"][0]["ports"][0]["state"] == "ACTIVE"
    assert (rec / "sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3").read_text() == (
        "RoCE v2\n"
    )
    again = [(c.name, c.status, c.value) for c in preflight_tree(rec)]
    assert again == [(c.name, c.status, c.value) for c in preflight_tree(src)]
    assert os.readlink(rec / "sys/class/infiniband/mlx5_0/device/driver").endswith("mlx5_core")


def test_roce_mtu_follows_the_kernels_header_allowance() -> None:
    assert roce_mtu(1500) == 1024 and roce_mtu(4200) == 4096 and roce_mtu(4191) == 2048
    assert roce_mtu(9000) == 4096 and roce_mtu(300) == 256


class _TreeRemote:
    """A stand-in for an SSH connection to a host whose root is a recorded tree: the probes
    run here (the RDMA probe's source in a bare Python, on the tree); installing stops."""

    def __init__(self, access, timeout, tree: Path) -> None:
        self.access, self.tree = access, tree

    def open(self) -> None:
        pass

    def close(self) -> None:
        pass

    def run_python(self, python, source, args, what):
        code = "import sys; src = bytes.fromhex(sys.argv[1]).decode(); sys.argv = sys.argv[1:]; "
        code += "exec(compile(src, 'genie-probe', 'exec'))"
        res = subprocess.run(
            [sys.executable, "-I", "-c", code, source.encode().hex(), str(self.tree)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return json.loads(res.stdout)

    def run(self, cmd, what, check=True):
        from genie.errors import DeployError

        raise DeployError(f"{what}: stopped by the test")


def test_deploy_runs_the_preflight_on_rdma_hosts(tmp_path: Path, monkeypatch) -> None:
    from genie.commands.deploy import outcome_json, preflight_lines
    from genie.deploy import deployer
    from genie.deploy.config import loads_deploy

    tree = connectx(tmp_path / "n0", ecn_off="roce_np")
    monkeypatch.setattr(deployer, "Remote", lambda a, t: _TreeRemote(a, t, tree))
    facts = {"root": "/r", "python": {"version": "3.11.2", "venv_module": True}, "rdma": []}
    monkeypatch.setattr(deployer, "probe", lambda remote: dict(facts))
    wheel = tmp_path / "genie-0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("genie/__init__.py", "")
    tb, cfg = loads_deploy(TESTBED.format(ip=IP))
    art = deployer.Artifacts.of(wheel)
    (out,) = deployer.deploy(tb, cfg, ["n0"], art)
    assert out.ok is False and "stopped by the test" in out.detail  # the install was reached
    assert out.preflight is not None and "preflight" in out.timings
    lines = preflight_lines([out])
    assert len(lines) == 1, lines  # ECN off, and nothing else failed or warned
    assert lines[0].startswith("rdma preflight n0: fail rdma ecn ens1f0: priority 3: roce_np 0")
    assert "echo 1 > /sys/class/net/ens1f0/ecn/roce_np/enable/3" in lines[0]
    data = outcome_json(out)
    assert {c["name"] for c in data["preflight"]} >= {"rdma gid mlx5_0/1", "memlock"}
    # a tcp testbed's hosts get no preflight, and their JSON has no preflight key
    tcp, cfg = loads_deploy(TESTBED.format(ip=IP).replace('transport = "rdma"', ""))
    (plain,) = deployer.deploy(tcp, cfg, ["n0"], art)
    assert plain.preflight is None and "preflight" not in outcome_json(plain)


def test_hosts_check_runs_the_preflight_over_ssh(tmp_path: Path, capsys) -> None:
    """The probe's source, shipped over SSH to this machine (no RDMA device here, most
    likely), gives the preflight's rows for an rdma testbed's host; a tcp host gets none."""
    from genie.deploy.testing import LocalSshd, LocalSshdUnavailable

    try:
        server = LocalSshd.start(tmp_path / "ssh")
    except LocalSshdUnavailable as exc:
        pytest.skip(f"cannot run a test sshd: {exc}")
    try:
        f = tmp_path / "tb.toml"
        f.write_text(
            '[testbed]\nname = "hc"\nkind = "static"\ntransport = "rdma"\n[topology]\n'
            'shape = "star"\nrate = "10gbit"\n[[hosts]]\nname = "h0"\n'
            'control = "127.0.0.1:7990"\ndata_addr = "127.0.0.1"\n'
            + server.deploy_toml(remote_root=str(tmp_path / "nothing-here"))
        )
        rc = main(["hosts", "check", "--testbed", str(f), "--json"])
        data = json.loads(capsys.readouterr().out)
    finally:
        server.stop()
    assert rc == 1  # genie is not installed under nothing-here
    rows = {c["name"]: c for c in data[0]["checks"]}
    names = list(rows)
    assert names.index("rdma device") < names.index("keys")  # after the host's own rows
    here = rdma_probe.gather("/", live=True)
    assert rows["memlock"]["status"] in ("ok", "fail")  # this machine's limit, read over SSH
    if not here["devices"]:
        assert rows["rdma device"]["status"] == "fail"
        assert "rdma link add genie-rxe0" in rows["rdma device"]["fix"]
    else:  # a host with RDMA devices: the row names one of them, or why none fits 127.0.0.1
        names = {d["name"] for d in here["devices"]}
        assert any(n in rows["rdma device"]["value"] for n in names), rows["rdma device"]


def test_lab_doc_commands_parse_and_its_rows_exist(tmp_path: Path) -> None:
    """docs/lab.md stays true: its genie commands parse, and the preflight rows its table names
    are the rows the preflight gives."""
    import re
    import shlex

    from genie.cli import build_parser

    text = (Path(__file__).parents[1] / "docs" / "lab.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    cmds = [ln.split("  #")[0].strip() for b in blocks for ln in b.splitlines()]
    cmds = [c for c in cmds if c.startswith("genie ")]
    assert len(cmds) >= 10
    parser = build_parser()
    for cmd in cmds:
        try:
            parser.parse_args(shlex.split(cmd)[1:])
        except SystemExit:
            pytest.fail(f"docs/lab.md: {cmd!r} does not parse")
    table = text.split("| row |", 1)[1].split("\n\n", 1)[0]
    named = re.findall(r"^\| `([a-z ]+(?: DEV/N| DEV| IF)?)`", table, re.M)
    assert len(named) == 11, named
    from genie.deploy.config import loads_deploy

    tb, _ = loads_deploy(TESTBED.format(ip=IP).replace('"100gbit"', '"400gbit"'))
    got = {c.name for c in preflight_tree(connectx(tmp_path), tb, tb.host("n0"))}
    for name in named:
        concrete = name.replace("DEV/N", "mlx5_0/1").replace("DEV", "mlx5_0")
        assert concrete.replace(" IF", " ens1f0") in got, (name, got)


def test_root_is_not_held_to_its_memlock_limit(tmp_path: Path) -> None:
    facts = rdma_probe.gather(str(connectx(tmp_path, memlock=65536)), live=False)
    assert "euid" not in facts  # a recorded tree: who will run the agent is not known
    assert _failed(evaluate_rdma(facts))["memlock"].value.startswith("64 KiB (hard 64 KiB)")
    rows = _rows(evaluate_rdma({**facts, "euid": 0}))
    assert rows["memlock"].status == "ok" and "CAP_IPC_LOCK" in rows["memlock"].value
    live = rdma_probe.gather("/")  # this machine, as the probe sees it over SSH
    assert live["live"] is True and live["euid"] == os.geteuid()


TWO_NICS = """
[testbed]
name = "rails"
kind = "static"
transport = "rdma"
[[hosts]]
name = "n0"
control = "10.0.0.10:7000"
ranks = 2
[[hosts.nics]]
data_addr = "192.168.100.10"
device = "ens1f0"
[[hosts.nics]]
data_addr = "192.168.101.10"
device = "ens1f1"
[[hosts]]
name = "n1"
control = "10.0.0.11:7000"
data_addr = "192.168.100.11"
[[switches]]
name = "sw"
[[links]]
a = "n0.nic0"
b = "sw"
rate = "100gbit"
[[links]]
a = "n0.nic1"
b = "sw"
rate = "100gbit"
[[links]]
a = "n1"
b = "sw"
rate = "100gbit"
"""


def test_each_nic_of_a_multi_nic_host_gets_its_own_device(tmp_path: Path) -> None:
    import shutil

    from genie.deploy.config import loads_deploy

    root = connectx(tmp_path)
    ib = root / "sys/class/infiniband"
    shutil.copytree(ib / "mlx5_0", ib / "mlx5_1", symlinks=True)
    (ib / "mlx5_1/device/net/ens1f0").rename(ib / "mlx5_1/device/net/ens1f1")
    port = ib / "mlx5_1/ports/1"
    for i in range(4):
        (port / f"gid_attrs/ndevs/{i}").write_text("ens1f1\n")
    for i in (2, 3):  # ::ffff:192.168.101.10
        (port / f"gids/{i}").write_text(IP_GID.replace("640a", "650a") + "\n")
    (port / "state").write_text("1: DOWN\n")
    net = root / "sys/class/net"
    shutil.copytree(net / "ens1f0", net / "ens1f1")
    tools = root / "genie-tools"
    shutil.copy(tools / "mlnx_qos-ens1f0.txt", tools / "mlnx_qos-ens1f1.txt")
    tb, _ = loads_deploy(TWO_NICS)
    checks = preflight_tree(root, tb, tb.host("n0"))
    rows = _rows(checks)
    assert rows["rdma device nic0"].value == f"mlx5_0 (mlx5_core) -> ens1f0 -> {IP}"
    assert rows["rdma device nic1"].value == "mlx5_1 (mlx5_core) -> ens1f1 -> 192.168.101.10"
    assert "192.168.101.10 is GID 3" in rows["rdma gid mlx5_1/1"].value
    # NCCL_IB_GID_INDEX=3 is right for both devices; only nic1's port is down
    assert set(_failed(checks)) == {"rdma port mlx5_1/1"}
    assert "ip link set dev ens1f1 up" in rows["rdma port mlx5_1/1"].fix
    assert rows["rdma mtu mlx5_1/1"].status == "skip"  # ibv_devinfo.txt lists mlx5_0 only


def test_infiniband_port_has_no_roce_rows(tmp_path: Path) -> None:
    """An HDR InfiniBand HCA: LID-routed (no RoCE GID, PFC or ECN rows); its MTU is the SM's."""
    ib = "sys/class/infiniband/mlx5_0"
    _w(tmp_path, f"{ib}/fw_ver", "20.31.1014")
    _w(tmp_path, f"{ib}/node_type", "1: CA")
    (tmp_path / ib / "device/net/ib0").mkdir(parents=True)
    port = f"{ib}/ports/1"
    _w(tmp_path, f"{port}/state", "4: ACTIVE")
    _w(tmp_path, f"{port}/phys_state", "5: LinkUp")
    _w(tmp_path, f"{port}/link_layer", "InfiniBand")
    _w(tmp_path, f"{port}/rate", "200 Gb/sec (4X HDR)")
    _w(tmp_path, f"{port}/lid", "0x12")
    _w(tmp_path, f"{port}/gids/0", "fe80:0000:0000:0000:b859:9f03:00d4:1234")
    _w(tmp_path, "genie-tools/ibv_devinfo.txt", DEVINFO.format(active=2048))
    rows = _rows(preflight_tree(tmp_path))
    assert rows["rdma port mlx5_0/1"].value == "ACTIVE, LinkUp, InfiniBand, 200 Gb/sec (4X HDR)"
    assert rows["rdma gid mlx5_0/1"].value == "InfiniBand: LID-routed, GID index 0"
    assert rows["rdma mtu mlx5_0/1"].status == "warn"
    assert "partitions.conf" in rows["rdma mtu mlx5_0/1"].fix
    assert not [n for n in rows if n.startswith(("rdma pfc", "rdma ecn", "rdma priority"))]
    # SM not running: the link is up but the port stays INIT
    (tmp_path / port / "state").write_text("2: INIT\n")
    failed = _failed(preflight_tree(tmp_path))
    assert "opensm" in failed["rdma port mlx5_0/1"].fix


def test_nccl_traffic_class_unset_is_a_warning_on_roce(tmp_path: Path) -> None:
    root = connectx(tmp_path)
    (root / "etc/nccl.conf").write_text("NCCL_IB_GID_INDEX=3\n")
    rows = _rows(preflight_tree(root))
    assert rows["rdma priority"].status == "warn"
    assert "NCCL sends traffic class 0 (priority 0)" in rows["rdma priority"].value
    assert rows["rdma priority"].fix.startswith("NCCL_IB_TC=106 in /etc/nccl.conf (DSCP 26")
    assert rows["rdma pfc ens1f0"].status == "ok"  # still checked on priority 3
    assert _rows(preflight_tree(root, priority=3)).get("rdma priority") is None  # chosen


def _with_tc(tc: int):
    from genie.deploy.config import loads_deploy

    tb, _ = loads_deploy(TESTBED.format(ip=IP) + f"[rdma]\ntraffic_class = {tc}\n")
    return tb, tb.host("n0")


def test_the_testbed_traffic_class_picks_the_priority_checked(tmp_path: Path) -> None:
    """genie's own queue pairs send [rdma] traffic_class: its priority (tc >> 5 under DSCP
    trust) is the one PFC and ECN must cover, whatever NCCL_IB_TC says; --priority overrides."""
    root = connectx(tmp_path)  # PFC on priority 3 only; NCCL_IB_TC=106 (priority 3)
    tb, host = _with_tc(106)  # DSCP 26 -> priority 3: all healthy
    checks = preflight_tree(root, tb, host)
    assert {c.status for c in checks} == {"ok"}, [c for c in checks if c.status != "ok"]
    assert checks[0].name == "rdma priority" and checks[0].value == (
        "3: genie's queue pairs send traffic class 106 ([rdma] traffic_class): DSCP 26 "
        "-> priority 3"
    )
    tb, host = _with_tc(160)  # DSCP 40 -> priority 5: genie's traffic would not be lossless
    checks = preflight_tree(root, tb, host)
    failed = _failed(checks)
    assert failed["rdma pfc ens1f0"].value.startswith("priority 5 off (enabled: 3")
    assert checks[0].value.startswith("5: genie's queue pairs send traffic class 160")
    nccl = [c for c in checks if c.name == "rdma priority" and "NCCL_IB_TC" in c.value]
    assert nccl and nccl[0].status == "warn"  # NCCL's own traffic lands on 3: said, not failed
    # --priority stays the override, and the row says what genie's queue pairs send instead
    over = preflight_tree(root, tb, host, priority=3)
    assert not _failed(over)
    assert over[0].status == "warn" and over[0].value == (
        "checked 3 (--priority); genie's queue pairs send traffic class 160 ([rdma] "
        "traffic_class): DSCP 40 -> priority 5"
    )
    assert over[0].fix.startswith("traffic_class = 106 in the testbed's [rdma]")
    # no [rdma] traffic_class: NCCL_IB_TC's priority, as before
    tb, host = _host(tmp_path)
    assert preflight_tree(root, tb, host)[0].value.startswith("3 (NCCL_IB_TC=106")


def test_hosts_check_takes_the_testbed_traffic_class(tmp_path: Path, capsys) -> None:
    root = connectx(tmp_path / "tree")
    tbf = tmp_path / "lab.toml"
    tbf.write_text(TESTBED.format(ip=IP) + "[rdma]\ntraffic_class = 160\n")
    args = ["hosts", "check", "--sysfs-root", str(root), "--testbed", str(tbf), "--hosts", "n0"]
    assert main([*args, "--json"]) == 1  # PFC off on priority 5
    rows = {c["name"]: c for c in json.loads(capsys.readouterr().out)[0]["checks"]}
    assert rows["rdma pfc ens1f0"]["status"] == "fail"
    assert main([*args, "--priority", "3", "--json"]) == 0
