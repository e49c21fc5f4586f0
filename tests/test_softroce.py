"""Soft-RoCE: command lists as strings, kernel checks on made-up trees, and this host's verdict."""

from __future__ import annotations

import json
import platform
import subprocess

import pytest

from genie.cli import main
from genie.errors import TestbedError
from genie.testbed import softroce as sr


def _links(*rows):
    return [{"name": n, "port": 1, "state": "ACTIVE", "netdev": d} for n, d in rows]


def test_up_loads_the_module_then_adds_a_genie_link() -> None:
    cmds = sr.up_commands("eth0", [], loaded=False)
    assert [" ".join(c) for c in cmds] == [
        "modprobe rdma_rxe",
        "rdma link add genie-rxe0 type rxe netdev eth0",
    ]
    assert [" ".join(c) for c in sr.up_commands("eth1", [], loaded=True, index=2)] == [
        "rdma link add genie-rxe2 type rxe netdev eth1"
    ]
    # a second netdev gets the next free name (the kernel refuses a name twice)
    taken = _links(("genie-rxe0", "eth0"), ("genie-rxe2", "eth2"))
    assert [" ".join(c) for c in sr.up_commands("eth1", taken, loaded=True)] == [
        "rdma link add genie-rxe1 type rxe netdev eth1"
    ]


def test_up_is_idempotent_and_refuses_odd_names() -> None:
    assert sr.up_commands("eth0", _links(("rxe0", "eth0")), loaded=False) == []
    for bad in ("", "../x", "-rf"):
        with pytest.raises(TestbedError, match="bad network device"):
            sr.up_commands(bad, [], loaded=True)


def test_down_removes_only_genie_links() -> None:
    links = _links(("genie-rxe0", "eth0"), ("rxe0", "eth1"), ("mlx5_0", ""), ("genie-rxe1", "x"))
    assert [" ".join(c) for c in sr.down_commands(links)] == [
        "rdma link delete genie-rxe0",
        "rdma link delete genie-rxe1",
    ]
    assert sr.down_commands(_links(("rxe0", "eth0"))) == []


def test_parse_links_reads_rdma_json() -> None:
    text = json.dumps(
        [
            {"ifindex": 0, "ifname": "genie-rxe0", "port": 1, "state": "ACTIVE",
             "physical_state": "LINK_UP", "netdev": "eth0", "netdev_index": 2},
        ]
    )  # fmt: skip
    assert sr.parse_links(text) == [
        {"name": "genie-rxe0", "port": 1, "state": "ACTIVE", "netdev": "eth0"}
    ]
    assert sr.parse_links("") == []
    with pytest.raises(TestbedError, match="cannot read"):
        sr.parse_links("link rxe0/1 state ACTIVE")


def test_apply_stops_at_the_first_failure_with_one_line() -> None:
    ran = []

    def run(cmd):
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 1 if cmd[0] == "rdma" else 0, "", "x\nboom\n")

    with pytest.raises(TestbedError) as info:
        sr.apply([["modprobe", "rdma_rxe"], ["rdma", "link", "add"], ["never"]], run)
    assert str(info.value) == "`rdma link add` failed (exit 1): boom"
    assert len(ran) == 2


def _tree(tmp_path, module=True, loaded=False, ib=False):
    rel = platform.release()
    if module:
        d = tmp_path / "lib/modules" / rel / "kernel/drivers/infiniband/sw/rxe"
        d.mkdir(parents=True)
        (d / "rdma_rxe.ko.xz").write_bytes(b"")
    if loaded:
        (tmp_path / "sys/module/rdma_rxe").mkdir(parents=True)
    if ib:
        (tmp_path / "sys/class/infiniband").mkdir(parents=True)
    return str(tmp_path)


def test_kernel_support_finds_the_module_file(tmp_path) -> None:
    ks = sr.kernel_support(_tree(tmp_path))
    assert ks.rxe_module.endswith("rdma_rxe.ko.xz") and ks.modules_dir and not ks.rxe_loaded
    assert ks.needs_modprobe
    ks2 = sr.kernel_support(_tree(tmp_path / "b", module=False, loaded=True, ib=True))
    assert ks2.rxe_loaded and not ks2.needs_modprobe and ks2.infiniband


def test_problem_says_plainly_what_the_kernel_lacks() -> None:
    base = dict(release="6.1.0", rxe_loaded=False, rxe_module="", modules_dir=False,
                modprobe="", rdma_tool="/usr/bin/rdma", infiniband=False)  # fmt: skip
    msg = sr.KernelSupport(**base).problem()
    assert msg.startswith("this kernel (6.1.0) has no soft-RoCE support: no /sys/class/infiniband")
    assert "no /lib/modules/6.1.0" in msg and "no modprobe" in msg
    no_mod = sr.KernelSupport(**{**base, "modules_dir": True, "modprobe": "/sbin/modprobe"})
    assert "no rdma_rxe module under /lib/modules/6.1.0" in no_mod.problem()
    ok = {**base, "modules_dir": True, "modprobe": "/sbin/modprobe", "rxe_module": "/x.ko"}
    assert sr.KernelSupport(**ok).problem() == ""
    assert "iproute2" in sr.KernelSupport(**{**ok, "rdma_tool": ""}).problem()


def test_this_host_verdict_and_cli(capsys) -> None:
    ks = sr.kernel_support()
    if not ks.problem():
        pytest.skip(f"kernel {ks.release} supports soft-RoCE; the refusal path is not exercised")
    assert main(["testbed", "softroce", "status"]) == 0
    out = capsys.readouterr().out
    assert "has no soft-RoCE support" in out and "RDMA devices: none" in out
    assert main(["testbed", "softroce", "up", "--netdev", "lo"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("genie: error: this kernel") and "\n" not in err
    assert main(["testbed", "softroce", "down", "--dry-run"]) == 0  # no links: nothing to remove
    assert capsys.readouterr().out == ""
