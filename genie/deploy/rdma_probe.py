# ruff: noqa: UP021, UP031  (this file must run on old Pythons too)
"""Gather what the RDMA preflight needs from a root (``/`` on a live host, or a recorded tree).

Stdlib only, no genie import, parses on old Pythons: ``genie hosts check`` sends this file's
source over SSH and runs it with the host's system Python (argument: the root, ``/``), and
``genie hosts check --sysfs-root DIR`` calls ``gather(DIR)`` here. The rules live in
``genie.deploy.rdma_checks``; this module only reads, and never raises: what it cannot read
becomes a one-line entry in ``errors``.

A recorded tree mirrors the host's root: ``sys/class/infiniband/DEV/...`` (fw_ver, hca_type,
board_id, ``device/net/IF``, ``ports/N/{state,phys_state,link_layer,rate}``,
``ports/N/gids/I``, ``ports/N/gid_attrs/{types,ndevs}/I``), ``sys/class/net/IF/{mtu,operstate}``,
``sys/class/net/IF/ecn/{roce_np,roce_rp}/enable/P`` (mlx5 with MLNX_OFED), ``proc/self/limits``
and ``etc/nccl.conf``. What sysfs lacks comes from tool outputs under ``genie-tools/``:
``ibv_devinfo.txt`` (``ibv_devinfo -v``: the ports' active MTU), ``mlnx_qos-IF.txt``
(``mlnx_qos -i IF``) or ``dcb-pfc-IF.txt`` (``dcb pfc show dev IF``): PFC per priority. On a
live host (root ``/``) the tools are run when installed. ``--record DIR`` copies what a live
run read into such a tree.
"""

import json
import os
import re
import shutil
import stat
import subprocess
import sys

MAX_FILE = 64 * 1024  # a sysfs attribute is a line; anything bigger is not one
MAX_TOOL = 2 * 1024 * 1024  # ibv_devinfo -v of a many-port host stays well under this
MAX_DEVICES = 64
MAX_PORTS = 32
MAX_GIDS = 1024
MAX_NETDEVS = 64
MAX_ERRORS = 50
PRIORITIES = 8
TOOLS_DIR = "genie-tools"
NCCL_KEYS = ("NCCL_IB_GID_INDEX", "NCCL_IB_TC", "NCCL_IB_HCA")


class Tree:
    """Bounded reads under a root; ``record``: copy every file read into that directory."""

    def __init__(self, root, record=None):
        self.root = os.path.abspath(root)
        self.record = record
        self.errors = []  # type: list[str]

    def path(self, rel):
        """The absolute path of ``rel`` under the root."""
        return os.path.join(self.root, rel.lstrip("/"))

    def note(self, msg):
        """Keep one line about what could not be read (bounded)."""
        if len(self.errors) < MAX_ERRORS:
            self.errors.append(msg[:300])

    def read(self, rel, limit=MAX_FILE):
        """The stripped text of ``rel``, or None when absent or unreadable."""
        p = self.path(rel)
        try:
            if not stat.S_ISREG(os.stat(p).st_mode):  # a FIFO or device would block or flood
                return None
            with open(p, "rb") as f:
                data = f.read(limit + 1)
        except OSError:
            return None
        if len(data) > limit:
            self.note("%s: larger than %d bytes, ignored" % (rel, limit))
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.note("%s: not text" % rel)
            return None
        self._save(rel, data)
        return text.strip()

    def _save(self, rel, data):
        if not self.record:
            return
        dst = os.path.join(self.record, rel.lstrip("/"))
        try:
            if not os.path.isdir(os.path.dirname(dst)):
                os.makedirs(os.path.dirname(dst))
            with open(dst, "wb") as f:
                f.write(data)
        except OSError as exc:
            self.note("record %s: %s" % (rel, exc))

    def save_tool(self, name, text):
        """Record a tool's output under ``genie-tools/`` (record mode only)."""
        self._save(TOOLS_DIR + "/" + name, text.encode("utf-8"))

    def _save_dir(self, rel):
        if self.record:
            try:
                d = os.path.join(self.record, rel.lstrip("/"))
                if not os.path.isdir(d):
                    os.makedirs(d)
            except OSError as exc:
                self.note("record %s: %s" % (rel, exc))

    def listdir(self, rel, limit):
        """Sorted entries of directory ``rel`` (at most ``limit``), [] when absent."""
        try:
            names = sorted(os.listdir(self.path(rel)))
        except OSError:
            return []
        if len(names) > limit:
            self.note("%s: %d entries, only the first %d read" % (rel, len(names), limit))
            names = names[:limit]
        self._save_dir(rel)
        for n in names:
            if os.path.isdir(self.path(rel + "/" + n)):
                self._save_dir(rel + "/" + n)
        return names

    def isdir(self, rel):
        """Whether ``rel`` is a directory under the root."""
        yes = os.path.isdir(self.path(rel))
        if yes:
            self._save_dir(rel)
        return yes

    def link_name(self, rel):
        """The last component of the symlink ``rel`` points to, or None."""
        try:
            target = os.readlink(self.path(rel))
        except (OSError, ValueError):
            return None
        if self.record:
            dst = os.path.join(self.record, rel.lstrip("/"))
            try:
                self._save_dir(os.path.dirname(rel))
                if not os.path.lexists(dst):
                    os.symlink(target, dst)
            except OSError as exc:
                self.note("record %s: %s" % (rel, exc))
        return os.path.basename(target.rstrip("/")) or None


def _numbered(tree, rel, limit):
    """Numeric entries of ``rel`` in numeric order; other names noted as malformed."""
    out = []
    for name in tree.listdir(rel, limit):
        if name.isdigit():
            out.append(int(name))
        else:
            tree.note("%s/%s: not a number, ignored" % (rel, name))
    return sorted(out)


def _after_colon(text):
    """``4: ACTIVE`` -> ``ACTIVE`` (sysfs state and phys_state)."""
    return (text or "").split(":")[-1].strip()


def _port(tree, base, num):
    pbase = "%s/ports/%d" % (base, num)
    gids = []
    for i in _numbered(tree, pbase + "/gids", MAX_GIDS):
        val = tree.read("%s/gids/%d" % (pbase, i))
        if not val or not val.replace(":", "").strip("0"):
            continue  # an empty slot of the GID table
        gids.append(
            {
                "index": i,
                "gid": val,
                "type": tree.read("%s/gid_attrs/types/%d" % (pbase, i)) or "",
                "ndev": tree.read("%s/gid_attrs/ndevs/%d" % (pbase, i)) or "",
            }
        )
    return {
        "port": num,
        "state": _after_colon(tree.read(pbase + "/state")),
        "phys_state": _after_colon(tree.read(pbase + "/phys_state")),
        "link_layer": tree.read(pbase + "/link_layer") or "",
        "rate": tree.read(pbase + "/rate") or "",
        "gids": gids,
    }


def _device(tree, name):
    base = "sys/class/infiniband/" + name
    ports = [_port(tree, base, n) for n in _numbered(tree, base + "/ports", MAX_PORTS)]
    netdevs = tree.listdir(base + "/device/net", MAX_NETDEVS)
    parent = tree.read(base + "/parent")  # soft-RoCE on older kernels names its netdev here
    return {
        "name": name,
        "fw_ver": tree.read(base + "/fw_ver") or "",
        "hca_type": tree.read(base + "/hca_type") or "",
        "board_id": tree.read(base + "/board_id") or "",
        "node_type": tree.read(base + "/node_type") or "",
        "driver": tree.link_name(base + "/device/driver") or "",
        "virtual": not tree.isdir(base + "/device"),  # no bus device: a software device
        "parent": parent or "",
        "netdevs": netdevs,
        "ports": ports,
    }


def _ecn(tree, netdev):
    base = "sys/class/net/%s/ecn" % netdev
    if not tree.isdir(base):
        return None
    out = {}
    for point in ("roce_np", "roce_rp"):
        prios = {}
        for p in _numbered(tree, "%s/%s/enable" % (base, point), PRIORITIES * 2):
            val = tree.read("%s/%s/enable/%d" % (base, point, p))
            if val is not None and val.strip() in ("0", "1") and p < PRIORITIES:
                prios[str(p)] = int(val)
            elif val is not None:
                tree.note("%s/%s/enable/%d: %r is not 0 or 1" % (base, point, p, val[:20]))
        out[point] = prios
    return out


def _netdev(tree, name):
    base = "sys/class/net/" + name
    mtu = tree.read(base + "/mtu")
    try:
        mtu_val = int(mtu) if mtu is not None else None
    except ValueError:
        tree.note("%s/mtu: %r is not a number" % (base, mtu[:20]))
        mtu_val = None
    return {
        "exists": tree.isdir(base),
        "mtu": mtu_val,
        "operstate": tree.read(base + "/operstate") or "",
        "ecn": _ecn(tree, name),
    }


def parse_devinfo(text):
    """``ibv_devinfo -v`` text -> {device: {port: {"active_mtu": n, "max_mtu": n, "state": s}}}."""
    out = {}  # type: dict[str, dict[str, dict[str, object]]]
    dev, port = None, None
    for line in text.splitlines()[:200000]:
        s = line.strip()
        m = re.match(r"hca_id:\s*(\S+)", s)
        if m:
            dev, port = m.group(1), None
            out[dev] = {}
            continue
        m = re.match(r"port:\s*(\d+)$", s)
        if m and dev is not None:
            port = m.group(1)
            out[dev][port] = {}
            continue
        m = re.match(r"(active_mtu|max_mtu):\s*(\d+)", s)
        if m and dev is not None and port is not None:
            out[dev][port][m.group(1)] = int(m.group(2))
            continue
        m = re.match(r"state:\s*(\S+)", s)
        if m and dev is not None and port is not None:
            out[dev][port]["state"] = m.group(1).replace("PORT_", "")
    return out


def parse_mlnx_qos(text):
    """``mlnx_qos -i IF`` text -> {"pfc": [8 x 0/1] or None, "trust": str or None}."""
    pfc, trust, prios = None, None, None
    for line in text.splitlines()[:10000]:
        s = line.strip()
        m = re.match(r"Priority trust state:\s*(\S+)", s, re.I)
        if m:
            trust = m.group(1).lower()
        words = s.split()
        if words[:1] == ["priority"] and len(words) == PRIORITIES + 1:
            prios = words[1:]
        elif words[:1] == ["enabled"] and prios is not None and len(words) == PRIORITIES + 1:
            if all(w in ("0", "1") for w in words[1:]) and prios == [
                str(i) for i in range(PRIORITIES)
            ]:
                pfc = [int(w) for w in words[1:]]
            prios = None
    return {"pfc": pfc, "trust": trust}


def parse_dcb_pfc(text):
    """``dcb pfc show dev IF`` text -> {"pfc": [8 x 0/1] or None, "trust": None}."""
    m = re.search(r"prio-pfc((?:\s+\d+:(?:on|off))+)", text)
    if not m:
        return {"pfc": None, "trust": None}
    pfc = [0] * PRIORITIES
    for item in m.group(1).split():
        p, state = item.split(":")
        if int(p) < PRIORITIES:
            pfc[int(p)] = 1 if state == "on" else 0
    return {"pfc": pfc, "trust": None}


def parse_limits(text):
    """``/proc/PID/limits`` text -> locked memory {"soft": bytes, "hard": bytes}; -1: unlimited."""
    for line in text.splitlines()[:200]:
        if line.startswith("Max locked memory"):
            parts = line[len("Max locked memory") :].split()
            if len(parts) < 2:
                return None
            vals = []
            for p in parts[:2]:
                if p == "unlimited":
                    vals.append(-1)
                elif p.isdigit():
                    vals.append(int(p))
                else:
                    return None
            return {"soft": vals[0], "hard": vals[1]}
    return None


def parse_nccl_conf(text):
    """``KEY=VALUE`` lines of an nccl.conf -> the NCCL_IB_* settings the preflight reads."""
    out = {}
    for line in text.splitlines()[:1000]:
        s = line.strip()
        if not s or s.startswith("#") or "=" not in s:
            continue
        k, v = s.split("=", 1)
        if k.strip() in NCCL_KEYS:
            out[k.strip()] = v.strip()
    return out


def _tool(cmd, timeout=15):
    """A tool's stdout on a live host, or None (absent, failed, timed out, too long)."""
    if not shutil.which(cmd[0]):
        return None
    try:
        p = subprocess.run(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            timeout=timeout,
            universal_newlines=True,
        )
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return None
    if p.returncode != 0 or len(p.stdout) > MAX_TOOL:
        return None
    return p.stdout


def _tool_text(tree, live, name, cmd):
    """A tool's output: recorded under ``genie-tools/`` in a tree, else run it on a live host."""
    recorded = tree.read(TOOLS_DIR + "/" + name, MAX_TOOL)
    if recorded is not None or not live:
        return recorded
    text = _tool(cmd)
    if text is not None:
        tree.save_tool(name, text)
    return text


def gather(root, live=None, record=None):
    """Every fact of the RDMA preflight under ``root``; ``live`` (default: root is ``/``)
    also runs ibv_devinfo, mlnx_qos and dcb, and reads this process's NCCL_* environment."""
    live = os.path.abspath(root) == "/" if live is None else live
    tree = Tree(root, record)
    facts = {"root": tree.root, "live": bool(live), "devices": [], "netdevs": {}}
    if live and hasattr(os, "geteuid"):
        facts["euid"] = os.geteuid()  # root registers memory whatever its memlock limit
    try:
        _gather(tree, live, facts)
    except Exception as exc:  # a malformed tree is a finding, never a traceback
        tree.note("rdma probe: %s: %s" % (type(exc).__name__, exc))
    facts["errors"] = tree.errors
    return facts


def _gather(tree, live, facts):
    ib = "sys/class/infiniband"
    facts["infiniband"] = tree.isdir(ib)
    names = tree.listdir(ib, MAX_DEVICES)
    facts["devices"] = [_device(tree, n) for n in names]
    wanted = []  # type: list[str]
    for d in facts["devices"]:
        cands = list(d["netdevs"])
        cands.append(d["parent"])
        cands += [g["ndev"] for p in d["ports"] for g in p["gids"]]
        for n in cands:
            if n and n not in wanted and "/" not in n and len(wanted) < MAX_NETDEVS:
                wanted.append(n)
    facts["netdevs"] = dict((n, _netdev(tree, n)) for n in wanted)
    text = _tool_text(tree, live, "ibv_devinfo.txt", ["ibv_devinfo", "-v"])
    facts["devinfo"] = parse_devinfo(text) if text is not None else None
    qos = {}
    for n in wanted:
        q = _tool_text(tree, live, "mlnx_qos-%s.txt" % n, ["mlnx_qos", "-i", n])
        if q is not None:
            qos[n] = dict(parse_mlnx_qos(q), source="mlnx_qos -i %s" % n)
            if qos[n]["pfc"] is not None:
                continue
        q = _tool_text(tree, live, "dcb-pfc-%s.txt" % n, ["dcb", "pfc", "show", "dev", n])
        if q is not None:
            got = parse_dcb_pfc(q)
            if got["pfc"] is not None or n not in qos:
                trust = qos.get(n, {}).get("trust")
                qos[n] = dict(got, trust=trust, source="dcb pfc show dev %s" % n)
    facts["qos"] = qos
    limits = tree.read("proc/self/limits")
    facts["memlock"] = parse_limits(limits) if limits is not None else None
    if limits is not None and facts["memlock"] is None:
        tree.note("proc/self/limits: no readable 'Max locked memory' line")
    nccl = {}  # type: dict[str, str]
    sources = []
    confs = ["etc/nccl.conf"]
    if live:
        confs.append(os.path.join(os.path.expanduser("~"), ".nccl.conf"))
    for conf in confs:
        text = tree.read(conf)
        if text is not None:
            got = parse_nccl_conf(text)
            if got:
                nccl.update(got)
                sources.append("/" + conf.lstrip("/"))
    if live:
        env = dict((k, os.environ[k]) for k in NCCL_KEYS if k in os.environ)
        if env:
            nccl.update(env)
            sources.append("environment")
    facts["nccl"] = nccl
    facts["nccl_source"] = ", ".join(sources)


def main(argv):
    """``rdma_probe.py [ROOT] [--record DIR]``: print the facts as JSON."""
    record = None
    if "--record" in argv:
        i = argv.index("--record")
        record = argv[i + 1] if i + 1 < len(argv) else None
        argv = argv[:i] + argv[i + 2 :]
    root = argv[0] if argv else "/"
    sys.stdout.write(json.dumps(gather(root, record=record)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
