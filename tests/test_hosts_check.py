"""``genie hosts check``: rules from probe facts (pure), and a real run over SSH to localhost."""

from __future__ import annotations

import json

import pytest

from genie.cli import main
from genie.deploy.checks import ClockOffset, evaluate
from genie.deploy.config import loads_deploy
from genie.deploy.ssh import probe_source
from genie.deploy.testing import LocalSshd, LocalSshdUnavailable

LAB = """
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
data_addr = "192.168.100.10"
nic = "ens1f0"
rdma_device = "mlx5_0"
[[hosts]]
name = "n1"
control = "10.0.0.11:7000"
data_addr = "192.168.100.11"
nic = "ens1f0"
"""


def _facts(**over):
    base = {
        "root": "/home/u/.genie",
        "python": {"exe": "/usr/bin/python3", "version": "3.11.2", "venv_module": True},
        "genie_version": None,
        "nics": [
            {"name": "lo", "up": True, "speed_mbit": 0, "mtu": 65536, "addresses": ["127.0.0.1"]},
            {"name": "ens1f0", "up": True, "speed_mbit": 100000, "mtu": 4200,
             "addresses": ["192.168.100.10"]},
        ],
        "rdma": [{"name": "mlx5_0", "netdevs": ["ens1f0"], "ports": [
            {"port": 1, "state": "ACTIVE", "link_layer": "Ethernet",
             "gids": [{"index": 0, "gid": "fe80:0000:0000:0000:0000:0000:0000:0001"}]}]}],
        "governors": {"performance": 32},
    }  # fmt: skip
    base.update(over)
    return base


def _by_name(checks):
    return {c.name: c for c in checks}


def test_healthy_lab_host_passes_and_missing_genie_names_its_fix() -> None:
    from genie import __version__

    tb, cfg = loads_deploy(LAB)
    h = tb.host("n0")
    ok = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(genie_version=__version__),
                           ClockOffset(0.0002, 0.001)))  # fmt: skip
    assert {c.status for c in ok.values()} == {"ok"}, ok
    assert "100000 Mbit/s" in ok["nic"].value and ok["rdma"].value.startswith("mlx5_0 port 1")
    bare = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(), None))
    assert bare["genie"].status == "fail" and "genie deploy" in bare["genie"].fix
    assert bare["clock"].status == "skip"


def test_each_broken_fact_fails_with_its_fix() -> None:
    tb, cfg = loads_deploy(LAB)
    h = tb.host("n0")
    nics = _facts()["nics"]
    nics[1] = {**nics[1], "mtu": 1500, "speed_mbit": 25000}
    c = _by_name(evaluate(
        tb, h, cfg.hosts["n0"],
        _facts(python={"exe": "x", "version": "3.9.2", "venv_module": True}, nics=nics,
               rdma=[], governors={"powersave": 30, "performance": 2}),
        ClockOffset(0.040, 0.002),
    ))  # fmt: skip
    assert c["python"].status == "fail" and "python3.11" in c["python"].fix
    assert c["mtu"].status == "fail" and "mtu 4200" in c["mtu"].fix
    assert (
        c["link speed"].status == "warn"
        and "25 Gbit/s < testbed 100 Gbit/s" in c["link speed"].value
    )
    assert c["rdma"].status == "fail" and "rdma_rxe" in c["rdma"].fix
    assert c["cpu governor"].status == "warn" and "powersave x30" in c["cpu governor"].value
    assert c["clock"].status == "warn" and "chrony" in c["clock"].fix
    down = [{**n, "up": False} if n["name"] == "ens1f0" else n for n in _facts()["nics"]]
    c = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(nics=down), None))
    assert c["nic"].status == "fail" and c["nic"].fix == "ip link set dev ens1f0 up"
    gone = [n for n in _facts()["nics"] if n["name"] != "ens1f0"]
    c = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(nics=gone), None))
    assert c["nic"].status == "fail" and "host has lo" in c["nic"].value


TCP_LAB = LAB.replace('transport = "rdma"', 'transport = "tcp"')
HOST_TCP = {
    "tcp_available_congestion_control": "reno bbr cubic",
    "tcp_allowed_congestion_control": "reno bbr",
    "tcp_congestion_control": "bbr",
    "tcp_ecn": "2",
    "tcp_slow_start_after_idle": "1",
    "tcp_rmem": "4096 131072 6291456",
    "tcp_wmem": "4096 16384 4194304",
    "fib_multipath_hash_policy": "0",
    "euid": 1000,
}


def _tcp_rows(toml: str, **tcp) -> dict:
    tb, cfg = loads_deploy(toml)
    facts = _facts(tcp={**HOST_TCP, **tcp})
    rows = _by_name(evaluate(tb, tb.host("n0"), cfg.hosts["n0"], facts, None))
    return {k: v for k, v in rows.items() if k.startswith("tcp")}


def test_tcp_rows_say_whether_the_agent_may_run_the_testbeds_stack() -> None:
    # cubic is loaded but not allowed for an unprivileged agent: reno, the next preferred
    rows = _tcp_rows(TCP_LAB)
    assert rows["tcp congestion"].status == "ok" and rows["tcp congestion"].value.startswith("reno")
    assert rows["tcp ecn"].status == "ok"  # passive on both sides
    sst = rows["tcp slow start after idle"]  # the host restarts idle connections; genie would not
    assert sst.status == "warn" and sst.fix == "sysctl -w net.ipv4.tcp_slow_start_after_idle=0"
    assert _tcp_rows(TCP_LAB, euid=0)["tcp congestion"].value.startswith("cubic")  # root may
    only_cubic = TCP_LAB + '[tcp]\ncongestion_control = "cubic"\nbuffer_max = "8MiB"\n'
    rows = _tcp_rows(only_cubic)
    cc = rows["tcp congestion"]
    assert cc.status == "fail" and 'allowed_congestion_control="reno bbr cubic"' in cc.fix
    assert rows["tcp tcp_rmem max"].status == "warn" and "8388608" in rows["tcp tcp_rmem max"].fix
    dctcp = _tcp_rows(TCP_LAB + '[tcp]\ncongestion_control = "dctcp"\n')["tcp congestion"]
    assert dctcp.status == "fail" and dctcp.fix == "modprobe tcp_dctcp"
    assert not _tcp_rows(LAB)  # RDMA: no TCP rows
    assert _tcp_rows(TCP_LAB, tcp_available_congestion_control=None)["tcp"].status == "skip"


def test_probe_script_parses_on_this_python() -> None:
    compile(probe_source(), "remote_probe", "exec")


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostcheck")
    try:
        server = LocalSshd.start(d / "ssh")
    except LocalSshdUnavailable as exc:
        pytest.skip(f"cannot run a test sshd: {exc}")
    try:
        yield server, d
    finally:
        server.stop()


def test_hosts_check_over_ssh(sshd, capsys) -> None:
    server, d = sshd
    f = d / "tb.toml"
    f.write_text(
        '[testbed]\nname = "hc"\nkind = "static"\n[topology]\nshape = "star"\nrate = "10gbit"\n'
        '[[hosts]]\nname = "h0"\ncontrol = "127.0.0.1:7990"\ndata_addr = "127.0.0.1"\n'
        '[[hosts]]\nname = "wrongkey"\ncontrol = "127.0.0.1:7991"\ndata_addr = "127.0.0.1"\n'
        + server.deploy_toml(remote_root=str(d / "nothing-here"))
        + f'[deploy.hosts.wrongkey]\nkey = "{server.other_key}"\n'
    )
    rc = main(["hosts", "check", "--testbed", str(f), "--json"])
    data = {x["host"]: x for x in json.loads(capsys.readouterr().out)}
    assert rc == 1
    h0 = {c["name"]: c for c in data["h0"]["checks"]}
    assert h0["reachable"]["status"] == "ok" and h0["python"]["status"] == "ok"
    assert h0["genie"]["status"] == "fail" and "nothing-here" in h0["genie"]["value"]
    assert h0["clock"]["status"] == "ok"  # the same machine's clock
    with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as allowed:
        may = allowed.read().split()
    cc = h0["tcp congestion"]  # this host's own stack, read over SSH
    assert cc["status"] in ("ok", "fail") and (
        "allowed: " + " ".join(may) in cc["value"] or "root" in cc["value"]
    )
    bad = data["wrongkey"]["checks"]
    assert [c["status"] for c in bad] == ["fail"]
    assert "authentication failed" in bad[0]["value"] and f"-p {server.port}" in bad[0]["fix"]
    assert not (d / "nothing-here").exists()  # a check changes nothing on the host


def test_host_keys_are_checked_against_known_hosts(sshd, capsys) -> None:
    server, d = sshd
    real = (server.dir / "host_key.pub").read_text().split()[:2]
    wrong = (server.dir / "other_key.pub").read_text().split()[:2]
    good_kh, bad_kh = d / "known_good", d / "known_bad"
    good_kh.write_text(f"[127.0.0.1]:{server.port} {' '.join(real)}\n")
    bad_kh.write_text(f"[127.0.0.1]:{server.port} {' '.join(wrong)}\n")
    f = d / "keys.toml"
    hosts = ["strict_unknown", "strict_known", "changed"]
    f.write_text(
        '[testbed]\nname = "hk"\nkind = "static"\n[topology]\nshape = "star"\nrate = "10gbit"\n'
        + "".join(
            f'[[hosts]]\nname = "{h}"\ncontrol = "127.0.0.1:{7980 + i}"\ndata_addr = "127.0.0.1"\n'
            for i, h in enumerate(hosts)
        )
        + server.deploy_toml(remote_root=str(d / "nothing-here"))
        + f'[deploy.hosts.strict_unknown]\nhost_keys = "strict"\nknown_hosts = "{d / "empty"}"\n'
        + f'[deploy.hosts.strict_known]\nhost_keys = "strict"\nknown_hosts = "{good_kh}"\n'
        + f'[deploy.hosts.changed]\nknown_hosts = "{bad_kh}"\n'
    )
    (d / "empty").write_text("")
    main(["hosts", "check", "--testbed", str(f), "--json"])
    data = {x["host"]: x["checks"][0] for x in json.loads(capsys.readouterr().out)}
    assert data["strict_known"]["status"] == "ok"
    assert data["strict_unknown"]["status"] == "fail"
    assert "not found in known_hosts" in data["strict_unknown"]["value"]
    assert data["changed"]["status"] == "fail"
    assert "host key does not match" in data["changed"]["value"]


RAILS = """
[testbed]
name = "rails"
kind = "static"
[[hosts]]
name = "n0"
control = "10.0.0.10:7000"
ranks = 2
[[hosts.nics]]
data_addr = "192.168.1.10"
device = "ens1f0"
[[hosts.nics]]
data_addr = "192.168.2.10"
device = "ens2f0"
[[hosts]]
name = "n1"
control = "10.0.0.11:7000"
data_addr = "192.168.1.11"
[[switches]]
name = "sw"
[[links]]
a = "n0.nic0"
b = "sw"
rate = "100gbit"
mtu = 4200
[[links]]
a = "n0.nic1"
b = "sw"
rate = "200gbit"
mtu = 9000
[[links]]
a = "n1"
b = "sw"
rate = "100gbit"
"""


def test_every_nic_of_a_multi_nic_host_is_checked_against_its_own_link() -> None:
    tb, cfg = loads_deploy(RAILS)
    h = tb.host("n0")
    lo, ens1 = _facts()["nics"]
    ens1 = {**ens1, "addresses": ["192.168.1.10"]}
    ens2 = {"name": "ens2f0", "up": True, "speed_mbit": 100000, "mtu": 4200,
            "addresses": ["192.168.2.10"]}  # fmt: skip
    c = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(nics=[lo, ens1, ens2]), None))
    # nic0 matches its 100G, MTU 4200 link; nic1 is a 100G port at MTU 4200 on a 200G, 9000 link
    assert c["nic nic0"].status == "ok" and c["mtu nic0"].status == "ok"
    assert "link speed nic0" not in c
    assert c["nic nic1"].status == "ok" and "ens2f0 up" in c["nic nic1"].value
    assert c["mtu nic1"].status == "fail" and "ens2f0 4200 < testbed 9000" in c["mtu nic1"].value
    assert "100 Gbit/s < testbed 200 Gbit/s" in c["link speed nic1"].value
    c = _by_name(evaluate(tb, h, cfg.hosts["n0"], _facts(nics=[lo, ens1]), None))
    assert (
        c["nic nic1"].status == "fail" and "NIC ens2f0 (host has lo, ens1f0)" in c["nic nic1"].value
    )
