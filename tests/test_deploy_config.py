"""Deploy settings in a testbed file, secret refusal, the wheel digest, the Ansible inventory."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from genie.cli import main
from genie.deploy.config import loads_deploy, select_hosts, strip_deploy_tables
from genie.deploy.deployer import python_problem
from genie.deploy.inventory import dumps_inventory, inventory_data
from genie.deploy.wheel import wheel_digest
from genie.errors import DeployConfigError, DeployError, TestbedError

BASE = """[testbed]
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
ranks = 8

[[hosts]]
name = "n1"
control = "10.0.0.11:7000"
data_addr = "192.168.100.11"
"""

DEPLOY = """
[deploy]
user = "lab"
key = "~/.ssh/id_lab"
remote_root = "/opt/genie-user"
wheelhouse = "bundle"

[deploy.hosts.n1]
ssh_host = "n1.mgmt"
port = 2222
python = "/usr/bin/python3.12"
"""


def test_defaults_overrides_and_access() -> None:
    tb, cfg = loads_deploy(BASE + DEPLOY)
    assert [h.name for h in tb.hosts] == ["n0", "n1"]
    n0, n1 = cfg.hosts["n0"], cfg.hosts["n1"]
    assert (n0.ssh_host, n0.port, n0.user) == ("10.0.0.10", 22, "lab")
    assert n0.key == str(Path("~/.ssh/id_lab").expanduser())
    assert (n1.ssh_host, n1.port, n1.python, n1.remote_root) == (
        "n1.mgmt", 2222, "/usr/bin/python3.12", "/opt/genie-user",
    )  # fmt: skip
    assert cfg.wheelhouse == "bundle" and cfg.service == "auto"
    plain_tb, plain_cfg = loads_deploy(BASE)
    assert plain_cfg.hosts["n1"].remote_root == "~/.genie" and plain_cfg.hosts["n1"].user is None
    assert plain_tb == tb


def test_testbed_errors_keep_their_line_numbers_after_the_deploy_tables() -> None:
    text = DEPLOY + "\n" + BASE.replace("ranks = 8", 'ranks = "eight"')
    line = text.splitlines().index('ranks = "eight"') + 1
    with pytest.raises(TestbedError, match=rf"<testbed>:{line}: hosts\[0\]\.ranks"):
        loads_deploy(text)
    assert strip_deploy_tables(text).count("\n") == text.count("\n")


@pytest.mark.parametrize(
    "snippet, key",
    [
        ('password = "hunter2"', "deploy.password"),
        ('sudo_password = "x"', "deploy.sudo_password"),
        ('key_passphrase = "x"', "deploy.key_passphrase"),
    ],
)
def test_password_fields_are_refused_with_line_and_no_value(snippet: str, key: str) -> None:
    text = BASE + DEPLOY.replace('user = "lab"', f'user = "lab"\n{snippet}')
    line = text.splitlines().index(snippet) + 1
    with pytest.raises(DeployConfigError) as exc:
        loads_deploy(text, "lab.toml")
    msg = str(exc.value)
    assert msg.startswith(f"lab.toml:{line}: {key}: passwords and secrets are refused")
    assert '"x"' not in msg and "hunter2" not in msg and "\n" not in msg


def test_password_in_a_host_table_is_refused_too(tmp_path, capsys) -> None:
    f = tmp_path / "tb.toml"
    f.write_text(BASE.replace("ranks = 8", 'ranks = 8\npassword = "pw"'))
    assert main(["deploy", "--testbed", str(f)]) == 2
    err = capsys.readouterr().err
    assert "hosts[0].password: passwords and secrets are refused" in err and 'pw"' not in err


@pytest.mark.parametrize(
    "extra, match",
    [
        ("[deploy]\nflavour = 1\n", "deploy.flavour: unknown key"),
        ("[deploy.hosts.n9]\nport = 22\n", "deploy.hosts.n9: no such host"),
        ("[deploy]\nport = 70000\n", "port: must be 1..65535"),
        ('[deploy]\nservice = "cron"\n', "deploy.service: must be one of"),
        ("[deploy.hosts.n0]\nssh_port = 1\n", r"deploy.hosts.n0.ssh_port: unknown key"),
    ],
)
def test_bad_deploy_settings_are_one_line_errors(extra: str, match: str) -> None:
    with pytest.raises(DeployConfigError, match=match):
        loads_deploy(BASE + extra)


def test_select_hosts() -> None:
    tb, _ = loads_deploy(BASE)
    assert select_hosts(tb, None) == ["n0", "n1"]
    assert select_hosts(tb, "n1, n0") == ["n0", "n1"]
    with pytest.raises(DeployError, match=r"unknown host.*n7"):
        select_hosts(tb, "n0,n7")


def test_python_problem_names_the_fix() -> None:
    def facts(v, venv=True):
        return {"python": {"version": v, "venv_module": venv}, "venv_python": None}

    assert python_problem(facts("3.11.2"), "python3") is None
    assert "needs >= 3.11" in python_problem(facts("3.9.2"), "python3")
    assert "python3-venv" in python_problem(facts("3.12.1", venv=False), "python3")


def test_wheel_digest_ignores_zip_timestamps(tmp_path) -> None:
    def make(path: Path, stamp: tuple, body: bytes) -> Path:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr(zipfile.ZipInfo("genie/__init__.py", stamp), body)
        return path

    a = make(tmp_path / "a.whl", (2020, 1, 1, 0, 0, 0), b"x = 1\n")
    b = make(tmp_path / "b.whl", (2024, 6, 1, 12, 0, 0), b"x = 1\n")
    c = make(tmp_path / "c.whl", (2020, 1, 1, 0, 0, 0), b"x = 2\n")
    assert a.read_bytes() != b.read_bytes()
    assert wheel_digest(a) == wheel_digest(b) != wheel_digest(c)


def test_inventory_parses_back_to_the_testbed(tmp_path, capsys) -> None:
    yaml = pytest.importorskip("yaml")
    tb, cfg = loads_deploy(BASE + DEPLOY)
    data = yaml.safe_load(dumps_inventory(tb, cfg, "lab.toml"))
    assert data == inventory_data(tb, cfg)
    hosts = data["all"]["children"]["genie_agents"]["hosts"]
    assert hosts["n0"]["ansible_host"] == "10.0.0.10" and hosts["n0"]["genie_mtu"] == 4200
    assert hosts["n1"]["ansible_port"] == 2222 and hosts["n1"]["ansible_host"] == "n1.mgmt"
    assert hosts["n1"]["ansible_python_interpreter"] == "/usr/bin/python3.12"
    assert hosts["n0"]["genie_rdma_device"] == "mlx5_0" and "genie_rdma_device" not in hosts["n1"]
    assert set(data["all"]["children"]["genie_rdma"]["hosts"]) == {"n0", "n1"}  # rdma testbed
    f = tmp_path / "lab.toml"
    f.write_text(BASE + DEPLOY)
    out = tmp_path / "inv" / "hosts.yml"
    assert main(["deploy", "--testbed", str(f), "--ansible-inventory", str(out)]) == 0
    assert yaml.safe_load(out.read_text()) == data
    capsys.readouterr()
    inv = Path(sys.executable).with_name("ansible-inventory")
    if not inv.exists() and not shutil.which("ansible-inventory"):
        pytest.skip("ansible-inventory not installed")
    proc = subprocess.run(
        [str(inv) if inv.exists() else "ansible-inventory", "-i", str(out), "--list"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    listed = __import__("json").loads(proc.stdout)
    assert listed["_meta"]["hostvars"]["n1"]["ansible_port"] == 2222
    assert sorted(listed["genie_agents"]["hosts"]) == ["n0", "n1"]


def test_rdma_extra_only_where_the_host_has_rdma_devices() -> None:
    import msgspec

    from genie.deploy.deployer import Artifacts, HostDeploy

    tb, cfg = loads_deploy(BASE)
    art = Artifacts(wheel=Path("genie-0.1.0-py3-none-any.whl"), digest="d")

    def extras(facts, mode="auto"):
        c = msgspec.structs.replace(cfg, rdma_extra=mode)
        job = HostDeploy(tb.host("n0"), c.hosts["n0"], c, art, lambda _h, _s: None)
        return job._extras(facts)

    mlx = {"rdma": [{"name": "mlx5_0", "ports": [], "netdevs": []}]}
    assert extras(mlx) == "rdma"
    assert extras({"rdma": []}) == ""
    assert extras({"rdma": []}, "yes") == "rdma" and extras(mlx, "no") == ""
    # the distribution's python3-pyverbs matches the host's rdma-core: preferred, no extra
    assert extras({**mlx, "pyverbs_distro": True}) == ""
