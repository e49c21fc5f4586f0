# ruff: noqa: UP021, UP022, UP031  (this file must run on old Pythons too)
"""Runs on a lab host (any Python 3, stdlib only): report what deploy and host checks need, as JSON.

Sent over SSH as source text and run by the host's system Python, before genie is installed
there, so it must not import genie and must parse on old Pythons. Argument: the remote root
(``~`` expanded here). Output: one JSON object on stdout.
"""

import glob
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def keys_digest(entries):
    """A digest of key-directory entries ``(relpath, mode, content)``: names, modes, bytes."""
    h = hashlib.sha256()
    for rel, mode, content in sorted(entries):
        h.update(("%s\0%o\0%d\0" % (rel, mode, len(content))).encode())
        h.update(content)
    return h.hexdigest()


def keys_state(path):
    """What is in the agent's key directory (digest, modes, public keys), or None if absent.

    Secret files are hashed into the digest but their bytes are never reported.
    """
    if not os.path.isdir(path):
        return None
    entries, modes, publics = [], {}, {}
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        rel_dir = os.path.relpath(dirpath, path)
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        mode = os.stat(dirpath).st_mode & 0o777
        entries.append((rel_dir, mode, b""))
        modes[rel_dir] = mode
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                mode = os.lstat(full).st_mode & 0o777
                with open(full, "rb") as f:
                    content = f.read(4096)
            except OSError:
                mode, content = 0, b""
            entries.append((rel_dir + name, mode, content))
            modes[rel_dir + name] = mode
            if name.endswith(".public"):
                publics[rel_dir + name] = content.decode("ascii", "replace").strip()
    return {"digest": keys_digest(entries), "modes": modes, "publics": publics}


def _alive(pid):
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return [x.decode("utf-8", "replace") for x in f.read().split(b"\0") if x]
    except (OSError, TypeError):
        return []


def _rdma():
    out = []
    for dev in sorted(glob.glob("/sys/class/infiniband/*")):
        ports = []
        for port in sorted(glob.glob(dev + "/ports/*")):
            gids = []
            for g in sorted(glob.glob(port + "/gids/*"), key=lambda p: int(os.path.basename(p))):
                val = _read(g)
                if val and val.replace(":", "").strip("0"):
                    gids.append({"index": int(os.path.basename(g)), "gid": val})
            ports.append(
                {
                    "port": int(os.path.basename(port)),
                    "state": (_read(port + "/state") or "").split(":")[-1].strip(),
                    "link_layer": _read(port + "/link_layer") or "",
                    "gids": gids,
                }
            )
        netdevs = [os.path.basename(p) for p in glob.glob(dev + "/device/net/*")]
        out.append({"name": os.path.basename(dev), "ports": ports, "netdevs": netdevs})
    return out


_TCP_SYSCTLS = (
    "tcp_available_congestion_control",
    "tcp_allowed_congestion_control",
    "tcp_congestion_control",
    "tcp_ecn",
    "tcp_slow_start_after_idle",
    "tcp_rmem",
    "tcp_wmem",
    "fib_multipath_hash_policy",
)


def _tcp():
    """The host's TCP stack (net.ipv4 sysctls; None where unreadable) and who runs the agent."""
    out = dict((k, _read("/proc/sys/net/ipv4/" + k)) for k in _TCP_SYSCTLS)
    out["euid"] = os.geteuid() if hasattr(os, "geteuid") else None
    return out


def _nics_sys():
    nics = []
    for path in sorted(glob.glob("/sys/class/net/*")):
        name = os.path.basename(path)
        try:
            speed = int(_read(path + "/speed") or -1)
        except ValueError:
            speed = -1
        nics.append(
            {
                "name": name,
                "up": (_read(path + "/operstate") or "") in ("up", "unknown"),
                "speed_mbit": max(speed, 0),
                "mtu": int(_read(path + "/mtu") or 0),
                "addresses": [],
            }
        )
    return nics


_PSUTIL_NICS = (
    "import json, socket, psutil\n"
    "st = psutil.net_if_stats(); ad = psutil.net_if_addrs(); out = []\n"
    "for n in sorted(st):\n"
    "    ips = [a.address.split('%')[0] for a in ad.get(n, [])\n"
    "           if a.family in (socket.AF_INET, socket.AF_INET6)]\n"
    "    out.append({'name': n, 'up': bool(st[n].isup), 'speed_mbit': int(st[n].speed),\n"
    "                'mtu': int(st[n].mtu), 'addresses': ips})\n"
    "print(json.dumps(out))\n"
)


def _run(cmd, timeout=20):
    try:
        p = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            universal_newlines=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def _systemd_user():
    if not shutil.which("systemctl"):
        return False
    try:
        p = subprocess.run(
            ["systemctl", "--user", "is-system-running"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=5,
            universal_newlines=True,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return p.stdout.strip() in ("running", "degraded", "starting")


def probe(root_arg):
    """Collect the facts about this host."""
    root = os.path.abspath(os.path.expanduser(root_arg))
    venv_py = os.path.join(root, "venv", "bin", "python")
    has_venv = os.access(venv_py, os.X_OK)
    facts = {
        "home": os.path.expanduser("~"),
        "user": os.environ.get("USER") or os.environ.get("LOGNAME") or "",
        "hostname": platform.node(),
        "root": root,
        "python": {
            "exe": sys.executable,
            "version": "%d.%d.%d" % sys.version_info[:3],
            "venv_module": _has_venv_module(),
        },
        "venv_python": venv_py if has_venv else None,
        "genie_version": None,
        "stamp": None,
        "agent_config": _read(os.path.join(root, "agent.json")),
        "keys": keys_state(os.path.join(root, "keys")),
        "agent": None,
        "rdma": _rdma(),
        "pyverbs_distro": any(
            os.path.isdir(os.path.join(d, "pyverbs"))
            for d in ("/usr/lib/python3/dist-packages", "/usr/lib64/python3/site-packages")
        ),
        "systemd_user": _systemd_user(),
        "governors": {},
        "nics": None,
        "tcp": _tcp(),
    }
    stamp = _read(os.path.join(root, "stamp.json"))
    if stamp:
        try:
            facts["stamp"] = json.loads(stamp)
        except ValueError:
            facts["stamp"] = None
    if has_venv:
        facts["genie_version"] = _run(
            [venv_py, "-c", "import genie, sys; sys.stdout.write(genie.__version__)"]
        )
        nics = _run([venv_py, "-c", _PSUTIL_NICS])
        if nics:
            try:
                facts["nics"] = json.loads(nics)
            except ValueError:
                facts["nics"] = None
    if facts["nics"] is None:
        facts["nics"] = _nics_sys()
    pidtext = _read(os.path.join(root, "agent.pid"))
    if pidtext:
        try:
            rec = json.loads(pidtext)
        except ValueError:
            rec = {}
        sup, ag = rec.get("supervisor"), rec.get("agent")
        facts["agent"] = {
            "supervisor": sup,
            "agent_pid": ag,
            "supervisor_alive": _alive(sup) and "genie.deploy.supervise" in " ".join(_cmdline(sup)),
            "agent_alive": _alive(ag)
            and any(a in _cmdline(ag) for a in ("genie_agent", "agents", "agent")),
            "agent_cmdline": _cmdline(ag) if _alive(ag) else [],
        }
    # a type comment, not an annotation: this file must parse on old Pythons
    govs = {}  # type: dict[str, int]
    for g in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_governor"):
        v = _read(g) or "?"
        govs[v] = govs.get(v, 0) + 1
    facts["governors"] = govs
    facts["time"] = time.time()
    return facts


def _has_venv_module():
    try:
        import ensurepip  # noqa: F401
        import venv  # noqa: F401
    except ImportError:
        return False
    return True


if __name__ == "__main__":
    sys.stdout.write(json.dumps(probe(sys.argv[1] if len(sys.argv) > 1 else "~/.genie")))
