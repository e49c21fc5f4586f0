"""Run shell scripts as root in a QEMU guest that sees this machine's ``/`` read-only.

For tests that need kernel features this machine's kernel lacks (sch_netem, rdma_rxe): the
guest boots Debian's kernel from /boot (``apt-get install qemu-system-x86 linux-image-amd64``)
under TCG, with this machine's root as its read-only root over 9p, so this checkout and its
venv run unchanged inside. A small initrd with the 9p modules is built once (mkinitramfs, the
host's /boot untouched) and cached under ``$GENIE_GUEST_CACHE`` (default
/var/tmp/genie-guest-cache). Each run gets a writable share, a ``genie-guest-*`` temp dir
removed afterwards: the script, its output and ``$GENIE_GUEST_OUT``, where the guest may leave
files for the caller.

Boots take about 8-15 s, so a test module should boot once and run its steps together
(:func:`run_steps_in_guest`). QEMU is started here and killed by its pid at the hard timeout.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from genie.errors import GenieError

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
QEMU = "qemu-system-x86_64"
# the 9p root and the virtio transport it needs; everything else loads from the host's
# /lib/modules once the root is mounted
INITRD_MODULES = ("9p", "9pnet", "9pnet_virtio", "virtio_pci")
# KVM hangs on this machine (nested); TCG boots in ~8 s. GENIE_GUEST_ACCEL=kvm to try it.
ACCEL = os.environ.get("GENIE_GUEST_ACCEL", "tcg")
MEMORY = "2G"
CPUS = 2
GUEST_CTL = "/run/genie-ctl"  # where the guest mounts the run's writable share
SHUTDOWN_MARGIN_S = 8.0  # the guest's script ends this long before the hard timeout
STEP_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

# PID 1 of the guest (run by the kernel from the read-only host root after the initrd
# mounted it). The kernel's own mounts may already be there; /run and /tmp become tmpfs so
# nothing of the host's shows through (its /run/netns above all), but the checkout the
# script runs in (which a CI clone may have under /tmp).
INIT_SH = f"""#!/bin/sh
# genie guest init (tests/guest.py): mount, run the script in {GUEST_CTL}, power off
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mountpoint -q /dev/pts || mount -t devpts devpts /dev/pts
mountpoint -q /dev/shm || mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs -o mode=755 tmpfs /run
mkdir -p {GUEST_CTL} /run/genie-host-tmp
mount --bind /tmp /run/genie-host-tmp
mount -t tmpfs -o mode=1777 tmpfs /tmp
if mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 genieout {GUEST_CTL}; then
    cut -d' ' -f1 /proc/uptime > {GUEST_CTL}/boot_s
    ip link set lo up
    . {GUEST_CTL}/env.sh
    # the checkout and cwd, where under the host's /tmp (a CI clone), show through
    for top in $GENIE_GUEST_HOST_TMP; do
        mkdir -p "/tmp/$top"
        mount --bind "/run/genie-host-tmp/$top" "/tmp/$top"
    done
    mkdir -p "$HOME" "$GENIE_GUEST_OUT"
    cd "$GENIE_GUEST_CWD" || cd /
    up=$(cut -d. -f1 /proc/uptime)
    left=$((GENIE_GUEST_DEADLINE - up))
    [ "$left" -ge 1 ] || left=1
    timeout -k 3 "$left" /bin/bash {GUEST_CTL}/script.sh \\
        > {GUEST_CTL}/stdout 2> {GUEST_CTL}/stderr < /dev/null
    echo $? > {GUEST_CTL}/rc.part
    mv {GUEST_CTL}/rc.part {GUEST_CTL}/rc
    umount {GUEST_CTL}
else
    echo "genie-guest: cannot mount the genieout share" > /dev/console
fi
sync
echo o > /proc/sysrq-trigger
sleep 60
"""


def _host_tmp_tops(*paths: Path) -> list[str]:
    """The first components below /tmp of ``paths`` that lie there (the guest's /tmp is its
    own tmpfs; these directories of the host's show through it)."""
    tops = []
    for p in paths:
        parts = Path(os.path.abspath(p)).parts
        if len(parts) > 2 and parts[1] == "tmp" and STEP_NAME.match(parts[2]):
            tops.append(parts[2])
    return sorted(set(tops))


class GuestError(GenieError):
    """The guest could not be started or never reported its script's exit status."""


@dataclass(frozen=True)
class StepResult:
    """One step of :func:`run_steps_in_guest`: its exit status and output."""

    rc: int
    stdout: str
    stderr: str
    seconds: float = float("nan")  # the step's run time, by the guest's clock


@dataclass(frozen=True)
class GuestResult:
    """What a guest run reported: the script's exit status and output, and timings."""

    rc: int
    stdout: str
    stderr: str
    out_dir: Path | None  # the files the guest wrote to $GENIE_GUEST_OUT (when asked for)
    boot_s: float  # guest uptime when its init started the script
    wall_s: float  # QEMU's whole run, as this machine timed it
    console: str  # the guest's serial console (kernel messages)
    steps: dict[str, StepResult] = field(default_factory=dict)

    def step(self, name: str) -> StepResult:
        """The result of step ``name``; GuestError (with the console's tail) if it never ended."""
        if name not in self.steps:
            raise GuestError(
                f"step {name!r} did not finish in the guest (rc {self.rc}); stderr:\n"
                f"{self.stderr[-2000:]}\nconsole tail:\n{self.console[-2000:]}"
            )
        return self.steps[name]


@dataclass(frozen=True)
class _Guest:
    kernel: Path
    initrd: Path
    init: Path


def cache_dir() -> Path:
    """Where the guest's initrd and init script are kept between runs."""
    return Path(os.environ.get("GENIE_GUEST_CACHE", "/var/tmp/genie-guest-cache"))


def _kernels() -> list[tuple[str, Path]]:
    """Installed kernels (version, vmlinuz) whose modules are in /lib/modules, newest first."""
    found = []
    for vmlinuz in Path("/boot").glob("vmlinuz-*"):
        ver = vmlinuz.name.removeprefix("vmlinuz-")
        if (Path("/lib/modules") / ver / "modules.dep").is_file() and os.access(vmlinuz, os.R_OK):
            found.append((ver, vmlinuz))
    return sorted(
        found,
        key=lambda kv: [int(x) if x.isdigit() else 0 for x in re.split(r"[.-]", kv[0])],
        reverse=True,
    )


def _has_module(ver: str, name: str) -> bool:
    """Whether kernel ``ver`` ships module ``name`` (per its modules.dep)."""
    dep = (Path("/lib/modules") / ver / "modules.dep").read_text()
    return re.search(rf"(^|/){re.escape(name)}\.ko(\.[a-z]+)?:", dep, re.MULTILINE) is not None


def _build_initrd(ver: str, out: Path) -> None:
    """A small initrd for kernel ``ver`` with the 9p root modules (mkinitramfs, own config)."""
    with tempfile.TemporaryDirectory(prefix="genie-guest-initrd-") as tmp:
        conf = Path(tmp) / "conf"
        shutil.copytree("/etc/initramfs-tools", conf, symlinks=True)
        text = (conf / "initramfs.conf").read_text()
        (conf / "initramfs.conf").write_text(re.sub(r"(?m)^MODULES=.*$", "MODULES=list", text))
        (conf / "modules").write_text("\n".join(INITRD_MODULES) + "\n")
        part = out.with_name(f"{out.name}.part-{os.getpid()}")
        proc = subprocess.run(
            ["mkinitramfs", "-d", str(conf), "-o", str(part), ver],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0 or not part.is_file():
            part.unlink(missing_ok=True)
            err = (proc.stderr or proc.stdout).strip().splitlines()
            raise GuestError(f"mkinitramfs failed: {err[-1] if err else proc.returncode}")
        os.replace(part, out)  # atomic: a concurrent builder sees the old file or the new one


def _write_if_changed(path: Path, text: str, mode: int) -> None:
    if not path.is_file() or path.read_text() != text:
        part = path.with_name(f"{path.name}.part-{os.getpid()}")
        part.write_text(text)
        part.chmod(mode)
        os.replace(part, path)


@functools.cache
def _prepare() -> _Guest | str:
    """The guest's kernel, initrd and init, built once; or why there can be none."""
    if shutil.which(QEMU) is None:
        return f"no {QEMU} (apt-get install qemu-system-x86)"
    kernels = _kernels()
    if not kernels:
        return "no guest kernel in /boot with its modules (apt-get install linux-image-amd64)"
    ver, vmlinuz = kernels[0]
    missing = [m for m in (*INITRD_MODULES, "sch_netem", "veth") if not _has_module(ver, m)]
    if missing:
        return f"kernel {ver} has no module {', '.join(missing)}"
    cache = cache_dir() / ver
    initrd = cache / "initrd.img"
    init = cache / "init.sh"
    stamp = cache / "initrd.modules"
    want = " ".join(INITRD_MODULES)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        _write_if_changed(init, INIT_SH, 0o755)
        fresh = initrd.is_file() and stamp.is_file() and stamp.read_text() == want
        if (
            fresh
            and initrd.stat().st_mtime
            < (Path("/lib/modules") / ver / "modules.dep").stat().st_mtime
        ):
            fresh = False  # modules were reinstalled since
        if not fresh:
            if shutil.which("mkinitramfs") is None:
                return (
                    "no mkinitramfs to build the guest's initrd (apt-get install initramfs-tools)"
                )
            t0 = time.monotonic()
            _build_initrd(ver, initrd)
            stamp.write_text(want)
            log.info("built the guest initrd %s in %.1fs", initrd, time.monotonic() - t0)
    except (OSError, subprocess.SubprocessError, GuestError) as e:
        return f"cannot build the guest's initrd in {cache}: {e}"
    return _Guest(kernel=vmlinuz, initrd=initrd, init=init)


def guest_unavailable() -> str | None:
    """Why no guest can run here, in one line (None: it can); builds the initrd once."""
    prepared = _prepare()
    return prepared if isinstance(prepared, str) else None


def _env_sh(env: Mapping[str, str]) -> str:
    bad = [k for k in env if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)]
    if bad:
        raise ValueError(f"not environment variable names: {bad}")
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def run_in_guest(
    script: str,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    out_dir: Path | None = None,
    cwd: Path = REPO,
) -> GuestResult:
    """Boot a guest, run bash ``script`` in it as root (in ``cwd``, read-only) and power off.

    ``timeout_s`` bounds the whole run, boot included: the script is stopped shortly before
    it, and QEMU killed at it. ``env`` adds to the guest's environment (PATH, HOME on a tmpfs,
    PYTHONDONTWRITEBYTECODE=1, GENIE_GUEST_OUT). Files the script leaves in
    ``$GENIE_GUEST_OUT`` are copied to ``out_dir`` when given. GuestError if QEMU cannot start
    or the guest never reports an exit status.
    """
    prepared = _prepare()
    if isinstance(prepared, str):
        raise GuestError(f"no guest: {prepared}")
    with tempfile.TemporaryDirectory(prefix="genie-guest-") as tmp:
        ctl = Path(tmp)
        ctl.chmod(0o755)
        deadline = max(1, int(timeout_s - SHUTDOWN_MARGIN_S))
        full_env = {
            "HOME": "/tmp/genie-home",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "GENIE_GUEST_OUT": f"{GUEST_CTL}/out",
            **(env or {}),
            "GENIE_GUEST_CWD": str(cwd),
            "GENIE_GUEST_HOST_TMP": " ".join(_host_tmp_tops(REPO, cwd)),
            "GENIE_GUEST_DEADLINE": str(deadline),
        }
        (ctl / "env.sh").write_text(_env_sh(full_env))
        (ctl / "script.sh").write_text(script)
        console = ctl / "console.log"
        cmd = [
            QEMU,
            "-accel",
            ACCEL,
            # TCG's default CPU lacks what the venv's compiled wheels use (illegal instruction)
            "-cpu",
            "host" if ACCEL == "kvm" else "max",
            "-m",
            MEMORY,
            "-smp",
            str(CPUS),
            "-nodefaults",
            "-display",
            "none",
            "-no-reboot",
            "-kernel",
            str(prepared.kernel),
            "-initrd",
            str(prepared.initrd),
            "-append",
            "console=ttyS0 quiet panic=-1 root=host0 rootfstype=9p ro"
            " rootflags=trans=virtio,version=9p2000.L,msize=512000,cache=loose"
            f" init={prepared.init}",
            "-virtfs",
            "local,path=/,mount_tag=host0,security_model=none,readonly=on,multidevs=remap",
            "-virtfs",
            f"local,path={ctl},mount_tag=genieout,security_model=none",
            "-serial",
            f"file:{console}",
        ]
        t0 = time.monotonic()
        log.debug("starting %s", shlex.join(cmd))
        try:
            qemu = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
        except OSError as e:
            raise GuestError(f"cannot start {QEMU}: {e}") from e
        try:
            qemu_out, _ = qemu.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            qemu.kill()  # the QEMU we started, by its pid
            qemu_out, _ = qemu.communicate()
        wall = time.monotonic() - t0
        rc_file = ctl / "rc"
        if not rc_file.is_file():
            raise GuestError(
                f"the guest never reported (QEMU exit {qemu.returncode} after {wall:.0f}s of"
                f" {timeout_s:.0f}s): {qemu_out.decode(errors='replace').strip()[-500:]}\n"
                f"console tail:\n{_read(console)[-3000:]}"
            )
        boot = _read(ctl / "boot_s").strip()
        if out_dir is not None and (ctl / "out").is_dir():
            shutil.copytree(ctl / "out", out_dir, dirs_exist_ok=True)
        return GuestResult(
            rc=int(rc_file.read_text().strip()),
            stdout=_read(ctl / "stdout"),
            stderr=_read(ctl / "stderr"),
            out_dir=out_dir,
            boot_s=float(boot) if boot else float("nan"),
            wall_s=wall,
            console=_read(console),
        )


def run_steps_in_guest(
    steps: Mapping[str, str],
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    *,
    out_dir: Path | None = None,
    cwd: Path = REPO,
) -> GuestResult:
    """Boot once and run each bash script of ``steps`` in order, each with its own exit status
    and output (``GuestResult.step(name)``); a failing step does not stop the next."""
    for name in steps:
        if not STEP_NAME.match(name):
            raise ValueError(f"step names are [A-Za-z0-9_.-]+, not {name!r}")
    lines = ['steps="$GENIE_GUEST_OUT/.genie-steps"', 'mkdir -p "$steps"']
    for i, (name, body) in enumerate(steps.items()):
        lines += [
            f"cat > \"$steps/{i}.sh\" <<'GENIE_STEP_EOF'",
            body.rstrip("\n"),
            "GENIE_STEP_EOF",
            "t0=$(cut -d' ' -f1 /proc/uptime)",
            f'bash "$steps/{i}.sh" > "$steps/{name}.out" 2> "$steps/{name}.err" < /dev/null',
            f'echo $? > "$steps/{name}.rc"',
            f'echo "$t0 $(cut -d\' \' -f1 /proc/uptime)" > "$steps/{name}.time"',
            f'echo "genie-guest: step {name} rc $(cat "$steps/{name}.rc")" >&2',
        ]
        if "\nGENIE_STEP_EOF\n" in f"\n{body}\n":
            raise ValueError(f"step {name!r} contains the heredoc delimiter")
    with tempfile.TemporaryDirectory(prefix="genie-guest-out-") as tmp:
        got = Path(tmp)
        res = run_in_guest("\n".join(lines) + "\n", timeout_s, env, out_dir=got, cwd=cwd)
        results = {}
        sd = got / ".genie-steps"
        for name in steps:
            rc = _read(sd / f"{name}.rc").strip()
            if rc:
                t = _read(sd / f"{name}.time").split()
                results[name] = StepResult(
                    int(rc),
                    _read(sd / f"{name}.out"),
                    _read(sd / f"{name}.err"),
                    float(t[1]) - float(t[0]) if len(t) == 2 else float("nan"),
                )
        shutil.rmtree(sd, ignore_errors=True)
        if out_dir is not None:
            shutil.copytree(got, out_dir, dirs_exist_ok=True)
    return GuestResult(
        rc=res.rc,
        stdout=res.stdout,
        stderr=res.stderr,
        out_dir=out_dir,
        boot_s=res.boot_s,
        wall_s=res.wall_s,
        console=res.console,
        steps=results,
    )
