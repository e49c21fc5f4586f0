"""The Ansible playbook: syntax, a check-mode run, and a real idempotent run of the agent role.

All against localhost with ``connection: local`` and an inventory written by
``genie deploy --ansible-inventory``. The real run only uses the ``agent`` tag (no system
changes: no packages, no sysctls) into a temporary root, installs offline from the dependency
bundle, and its agent is stopped by pid in teardown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from genie.cli import main
from genie.controller.local import free_port_range, stop_pids
from genie.deploy.hello import say_hello
from genie.testbed import Host

REPO = Path(__file__).resolve().parent.parent
ANSIBLE = REPO / "ansible"
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    p = BIN / name
    if p.exists():
        return str(p)
    found = shutil.which(name)
    if not found:
        pytest.skip(f"{name} not installed (pip install ansible-core)")
    return found


def _playbook(inventory: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    cmd = [
        _tool("ansible-playbook"), "-i", str(inventory), str(ANSIBLE / "site.yml"),
        "-c", "local", "-e", "ansible_become=false", "-e", "genie_manage_packages=false",
        "-e", f"ansible_python_interpreter={sys.executable}", *args,
    ]  # fmt: skip
    env = {**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_HOME": str(inventory.parent / ".ansible")}  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _recap(out: str, host: str) -> dict[str, int]:
    m = re.search(rf"^{host}\s*:\s*(.*)$", out, re.MULTILINE)
    assert m, out[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    d = tmp_path_factory.mktemp("ansible")
    port = free_port_range(1)
    tb = d / "tb.toml"
    tb.write_text(
        '[testbed]\nname = "ans"\nkind = "static"\nmissed_beats = 7\n'
        f'[[hosts]]\nname = "h0"\ncontrol = "127.0.0.1:{port}"\ndata_addr = "127.0.0.1"\n'
        f'[deploy]\nremote_root = "{d / "root"}"\n'
    )
    inv = d / "hosts.yml"
    assert main(["deploy", "--testbed", str(tb), "--ansible-inventory", str(inv)]) == 0
    return {"dir": d, "inv": inv, "root": d / "root", "port": port}


@pytest.fixture(scope="module")
def wheel():
    from genie.deploy.wheel import build_wheel

    return build_wheel()


def test_syntax_check(inventory) -> None:
    proc = _playbook(inventory["inv"], "--syntax-check")
    assert proc.returncode == 0, proc.stderr + proc.stdout


@pytest.mark.slow
def test_check_mode_changes_nothing(inventory, wheel) -> None:
    proc = _playbook(inventory["inv"], "--check", "-e", f"genie_wheel={wheel}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    recap = _recap(proc.stdout, "h0")
    assert recap["failed"] == 0 and recap["unreachable"] == 0
    assert recap["changed"] > 0  # it would create the root, copy the wheel, write the config
    assert not inventory["root"].exists()  # ... but check mode did not


@pytest.mark.slow
def test_agent_role_for_real_then_idempotent(inventory, wheel) -> None:
    from genie.deploy.wheel import bundle_dependencies

    bundle = bundle_dependencies(wheel)[0].parent
    extra = json.dumps(
        {"genie_wheel": str(wheel), "genie_pip_args": ["--no-index", "--find-links", str(bundle)]}
    )
    root = inventory["root"]
    try:
        first = _playbook(inventory["inv"], "--tags", "agent", "-e", extra)
        assert first.returncode == 0, first.stdout[-3000:] + first.stderr
        assert _recap(first.stdout, "h0")["changed"] >= 4
        rec = json.loads((root / "agent.pid").read_text())
        cmd = Path(f"/proc/{rec['agent']}/cmdline").read_bytes().split(b"\0")
        assert cmd[0].decode() == str(root / "venv" / "bin" / "python")
        assert cmd[cmd.index(b"--missed-beats") + 1] == b"7"  # the testbed's liveness rule
        host = Host(name="h0", control=f"127.0.0.1:{inventory['port']}", data_addr="127.0.0.1")
        hello = say_hello(host, 10.0)
        assert hello.reply is not None and hello.reply.pid == rec["agent"], hello.error
        second = _playbook(inventory["inv"], "--tags", "agent", "-e", extra)
        assert second.returncode == 0, second.stdout[-3000:] + second.stderr
        assert _recap(second.stdout, "h0")["changed"] == 0, second.stdout[-3000:]
        assert json.loads((root / "agent.pid").read_text())["agent"] == rec["agent"]
    finally:
        venv_py = root / "venv" / "bin" / "python"
        if venv_py.exists() and (root / "agent.pid").exists():
            rec = json.loads((root / "agent.pid").read_text())
            subprocess.run(
                [str(venv_py), "-m", "genie.deploy.agentctl", str(root), "stop"],
                capture_output=True, timeout=30,
            )  # fmt: skip
            stop_pids([rec["agent"]], timeout_s=5)  # by pid, if agentctl could not


def test_ansible_lint_if_available() -> None:
    lint = BIN / "ansible-lint"
    if not lint.exists() and not shutil.which("ansible-lint"):
        pytest.skip("ansible-lint not installed")
    proc = subprocess.run(
        [str(lint) if lint.exists() else "ansible-lint", "--offline", str(ANSIBLE / "site.yml")],
        capture_output=True, text=True, timeout=240, cwd=ANSIBLE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr


MULTI_NIC = (
    '[testbed]\nname = "mn"\nkind = "static"\n'
    '[[hosts]]\nname = "a"\ncontrol = "10.0.0.1:7000"\nranks = 2\n'
    '[[hosts.nics]]\ndata_addr = "10.1.0.1"\ndevice = "ens1f0"\nrdma_device = "mlx5_0"\n'
    '[[hosts.nics]]\ndata_addr = "10.2.0.1"\ndevice = "ens1f1"\nrdma_device = "mlx5_1"\n'
    '[[hosts]]\nname = "b"\ncontrol = "10.0.0.2:7000"\nnic = "eth0"\n'
    '[[switches]]\nname = "sw"\n'
    '[[links]]\na = "a.nic0"\nb = "sw"\nrate = "100gbit"\nmtu = 9000\n'
    '[[links]]\na = "a.nic1"\nb = "sw"\nrate = "100gbit"\nmtu = 4200\n'
    '[[links]]\na = "b"\nb = "sw"\nrate = "100gbit"\n'
)


def test_the_tuning_role_tunes_every_nic_of_a_multi_nic_host(tmp_path) -> None:
    from genie.deploy.config import loads_deploy
    from genie.deploy.inventory import inventory_data

    hosts = inventory_data(*loads_deploy(MULTI_NIC))["all"]["children"]
    hv = hosts["genie_agents"]["hosts"]
    nics = [{"name": "ens1f0", "mtu": 9000}, {"name": "ens1f1", "mtu": 4200}]
    assert hv["a"]["genie_nics"] == nics
    assert "genie_nics" not in hv["b"] and hv["b"]["genie_nic"] == "eth0"
    # the role's list of NICs to tune, from those variables (what its MTU and IRQ tasks loop on)
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        f"  vars_files: [{ANSIBLE / 'roles' / 'tuning' / 'defaults' / 'main.yml'}]\n"
        "  tasks:\n    - ansible.builtin.debug:\n"
        "        msg: \"NICS={{ genie_data_nics | map(attribute='name') | join(',') }} "
        "MTUS={{ genie_data_nics | map(attribute='mtu', default='-') | join(',') }}\"\n"
    )
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOME": str(tmp_path / ".ansible")}
    for extra, want in [
        (json.dumps({"genie_nics": nics}), "NICS=ens1f0,ens1f1 MTUS=9000,4200"),
        (json.dumps({"genie_nic": "eth0"}), "NICS=eth0 MTUS=-"),
        ("{}", "NICS= MTUS="),
    ]:
        proc = subprocess.run(
            [_tool("ansible-playbook"), "-i", "localhost,", "-c", "local", str(play), "-e", extra],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr
        assert f'"msg": "{want}"' in proc.stdout, proc.stdout[-2000:]
