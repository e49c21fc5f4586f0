"""SSH to a lab host with fabric: run commands, copy files, run Python source; one-line errors.

Every failure becomes a ``DeployError`` whose message names the host and says what failed
(unreachable, refused, authentication, timeout, a command's last stderr line). Commands and
their output are never logged with secrets: genie takes none (keys are given by path).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shlex
import socket
from pathlib import Path
from typing import Any

from genie.deploy.config import HostAccess
from genie.errors import DeployError, SshError

COMMAND_TIMEOUT_S = 300.0


def shell_path(path: str) -> str:
    """Quote a remote path for sh, letting a leading ``~/`` expand to $HOME."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def _why(exc: BaseException) -> str:
    import paramiko

    if isinstance(exc, paramiko.AuthenticationException):
        return "authentication failed (check user and key)"
    if isinstance(exc, paramiko.BadHostKeyException):
        return "host key does not match known_hosts (remove the stale entry if the host changed)"
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        return "connection refused (is sshd running on that port?)"
    if isinstance(exc, socket.timeout | TimeoutError):
        return "connection timed out"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve host name ({exc.strerror})"
    if isinstance(exc, paramiko.SSHException) and "known_hosts" in str(exc):
        return f"{exc} (host_keys = strict: add it with ssh-keyscan, after checking it)"
    if isinstance(exc, paramiko.SSHException):
        return f"ssh error: {exc}"
    if isinstance(exc, OSError):
        return f"{exc.strerror or exc}"
    return f"{type(exc).__name__}: {exc}"


class Remote:
    """One SSH connection to a host."""

    def __init__(self, access: HostAccess, connect_timeout: float = 10.0) -> None:
        from fabric import Config, Connection

        self.access = access
        kwargs: dict[str, Any] = {
            "banner_timeout": connect_timeout,
            "auth_timeout": connect_timeout,
        }
        if access.key:
            if not Path(access.key).is_file():
                raise SshError(f"{access.name}: ssh key {access.key} does not exist")
            kwargs.update(key_filename=[access.key], look_for_keys=False, allow_agent=False)
        config = Config(overrides={"run": {"hide": True, "warn": True, "in_stream": False}})
        self.conn = Connection(
            access.ssh_host,
            user=access.user,
            port=access.port,
            connect_timeout=connect_timeout,
            connect_kwargs=kwargs,
            config=config,
        )
        self._host_keys()

    def _host_keys(self) -> None:
        import paramiko

        a, client = self.access, self.conn.client
        path = a.known_hosts or os.path.expanduser("~/.ssh/known_hosts")
        if os.path.isfile(path):
            try:
                client.load_host_keys(path)
            except (OSError, paramiko.SSHException) as exc:
                raise DeployError(f"{a.name}: cannot read known_hosts {path}: {exc}") from None
        elif a.known_hosts:
            raise DeployError(f"{a.name}: known_hosts file {path} does not exist")
        if a.host_keys == "strict":
            client.set_missing_host_key_policy(paramiko.RejectPolicy())

    def open(self) -> Remote:
        """Connect now (so that reachability errors surface here)."""
        try:
            self.conn.open()
        except Exception as exc:  # paramiko raises many unrelated types
            raise SshError(f"ssh to {self.access.target}: {_why(exc)}") from None
        return self

    def run(self, cmd: str, what: str, timeout: float = COMMAND_TIMEOUT_S, check: bool = True):
        """Run ``cmd`` (sh syntax); DeployError naming ``what`` if it fails and ``check``."""
        try:
            res = self.conn.run(cmd, timeout=timeout)
        except Exception as exc:
            raise DeployError(f"{what}: {_why(exc)}") from None
        if check and res.exited != 0:
            lines = [x for x in (res.stderr + "\n" + res.stdout).splitlines() if x.strip()]
            errs = [x for x in lines if "error" in x.lower()]
            last = (errs or lines or [f"exit status {res.exited}"])[-1].strip()
            raise DeployError(f"{what}: {last[:300]}")
        return res

    def run_python(self, python: str, source: str, args: list[str], what: str) -> Any:
        """Run Python ``source`` with the host's ``python`` and decode its JSON stdout."""
        blob = base64.b64encode(source.encode()).decode()
        code = f"import base64;exec(compile(base64.b64decode('{blob}'),'genie-probe','exec'))"
        argv = " ".join(shell_path(a) if a.startswith("~") else shlex.quote(a) for a in args)
        res = self.run(f"{shlex.quote(python)} -c {shlex.quote(code)} {argv}", what, check=False)
        if res.exited == 127 or ("not found" in res.stderr and not res.stdout):
            raise DeployError(
                f"{what}: {python} not found on the host; install Python >= 3.11 "
                "or set [deploy] python"
            )
        if res.exited != 0:
            last = (res.stderr.strip().splitlines() or [f"exit status {res.exited}"])[-1]
            raise DeployError(f"{what}: {last[:300]}")
        try:
            return json.loads(res.stdout)
        except ValueError:
            raise DeployError(f"{what}: unreadable reply {res.stdout[:120]!r}") from None

    def put(self, local: Path, remote: str, what: str) -> None:
        """Copy one file to an absolute remote path."""
        try:
            self.conn.put(str(local), remote=remote)
        except Exception as exc:
            raise DeployError(f"{what}: {_why(exc)}") from None

    def put_bytes(self, data: bytes, remote: str, mode: int, what: str) -> None:
        """Write ``data`` to a new remote file over SFTP, made ``mode`` before any byte lands."""
        try:
            sftp = self.conn.sftp()
            with sftp.open(remote, "wb") as f:
                f.chmod(mode)
                f.write(data)
        except Exception as exc:
            raise DeployError(f"{what}: {_why(exc)}") from None

    def write_text(self, remote: str, text: str, what: str) -> None:
        """Write ``text`` to an absolute remote path (atomically: temp file then rename)."""
        import io

        try:
            self.conn.put(io.BytesIO(text.encode()), remote=remote + ".tmp")
        except Exception as exc:
            raise DeployError(f"{what}: {_why(exc)}") from None
        self.run(f"mv -f {shlex.quote(remote + '.tmp')} {shlex.quote(remote)}", what)

    def close(self) -> None:
        """Close the connection."""
        with contextlib.suppress(Exception):
            self.conn.close()

    def __enter__(self) -> Remote:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def probe_source() -> str:
    """The source of the host probe script."""
    return (Path(__file__).with_name("remote_probe.py")).read_text()


def probe(remote: Remote, what: str = "probe") -> dict[str, Any]:
    """Run the host probe with the host's system Python; return its facts."""
    a = remote.access
    return remote.run_python(a.python, probe_source(), [a.remote_root], f"{a.name}: {what}")
