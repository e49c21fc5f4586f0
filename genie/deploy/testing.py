"""A throwaway sshd on a loopback port, with generated keys, for testing deploys for real.

``LocalSshd.start(directory)`` needs ``/usr/sbin/sshd`` (it installs nothing); it writes a host
key, a client key, ``authorized_keys`` and an ``sshd_config`` (127.0.0.1, a free port, pid file
in the directory, public keys only) into ``directory``, runs ``sshd -D`` as a child and waits
for its banner. ``stop()`` ends that child by pid. ``LocalSshdUnavailable`` says why it could not
run (tests skip with that reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

SSHD = "/usr/sbin/sshd"
START_TIMEOUT_S = 10.0


class LocalSshdUnavailable(Exception):
    """sshd is missing or cannot start here; the message says why."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> None:
    cmd = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "genie-test", "-f", str(path)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LocalSshdUnavailable(f"ssh-keygen failed: {exc}") from None


def _sftp_server() -> str:
    for p in (
        "/usr/lib/openssh/sftp-server",
        "/usr/libexec/openssh/sftp-server",
        "/usr/libexec/sftp-server",
    ):
        if os.access(p, os.X_OK):
            return p
    return "internal-sftp"


class LocalSshd:
    """One sshd child process on 127.0.0.1 accepting ``client_key``."""

    def __init__(self, directory: Path, port: int, proc: subprocess.Popen, user: str) -> None:
        self.dir = directory
        self.port = port
        self.proc = proc
        self.user = user
        self.client_key = directory / "client_key"
        self.other_key = directory / "other_key"  # a key sshd does not accept

    @classmethod
    def start(cls, directory: str | Path, extra_config: Sequence[str] = ()) -> LocalSshd:
        """Generate keys and config in ``directory`` and start sshd; raise LocalSshdUnavailable.

        ``extra_config``: more sshd_config lines (e.g. a ``ForceCommand`` that runs every
        command inside a test network namespace)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        if not os.access(SSHD, os.X_OK):
            raise LocalSshdUnavailable(f"{SSHD} not found (install openssh-server)")
        if not shutil.which("ssh-keygen"):
            raise LocalSshdUnavailable("ssh-keygen not found (install openssh-client)")
        if os.geteuid() == 0 and not Path("/run/sshd").is_dir():
            # sshd's privilege-separation directory, normally made by its service unit
            try:
                Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
            except OSError as exc:
                raise LocalSshdUnavailable(f"cannot create /run/sshd: {exc}") from None
        for name in ("host_key", "client_key", "other_key"):
            if not (d / name).exists():
                _keygen(d / name)
        (d / "authorized_keys").write_text((d / "client_key.pub").read_text())
        os.chmod(d / "authorized_keys", 0o600)
        port = _free_port()
        user = os.environ.get("USER") or _whoami()
        config = d / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {d / 'host_key'}",
                    f"PidFile {d / 'sshd.pid'}",
                    f"AuthorizedKeysFile {d / 'authorized_keys'}",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "StrictModes no",
                    "UsePAM no",
                    f"AllowUsers {user}",
                    "MaxStartups 64",
                    "MaxSessions 64",
                    f"Subsystem sftp {_sftp_server()}",
                    "LogLevel ERROR",
                    *extra_config,
                    "",
                ]
            )
        )
        check = subprocess.run(
            [SSHD, "-t", "-f", str(config)], capture_output=True, text=True, timeout=30
        )
        if check.returncode:
            raise LocalSshdUnavailable(f"sshd rejects the test config: {check.stderr.strip()}")
        log = open(d / "sshd.log", "wb")  # noqa: SIM115 (the child holds it)
        proc = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        server = cls(d, port, proc, user)
        try:
            server._wait_banner()
        except BaseException:
            server.stop()
            raise
        return server

    def _wait_banner(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = (self.dir / "sshd.log").read_text(errors="replace").strip()
                rc = self.proc.returncode
                raise LocalSshdUnavailable(f"sshd exited with {rc}: {text[-300:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=1) as s,
            ):
                s.settimeout(2)
                if s.recv(64).startswith(b"SSH-"):
                    return
            time.sleep(0.05)
        raise LocalSshdUnavailable(f"sshd did not answer on port {self.port} in {START_TIMEOUT_S}s")

    def stop(self) -> None:
        """End the sshd child by pid (SIGTERM, then SIGKILL)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def deploy_toml(self, **extra: object) -> str:
        """``[deploy]`` settings that reach this sshd with the client key."""
        lines = [
            "[deploy]",
            f'user = "{self.user}"',
            f"port = {self.port}",
            f'key = "{self.client_key}"',
        ]
        for k, v in extra.items():
            if isinstance(v, str):
                lines.append(f"{k} = {json.dumps(v)}")
            elif isinstance(v, list | tuple):
                lines.append(f"{k} = {json.dumps([str(x) for x in v])}")
            else:
                lines.append(f"{k} = {v}")
        return "\n".join(lines) + "\n"


def _whoami() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name
