"""Read a testbed TOML file into a validated Testbed; every error names file, line and key."""

from __future__ import annotations

import ipaddress
import re
import tomllib
from pathlib import Path as FsPath
from typing import Any

from genie.collectives.topology import (
    DEFAULT_CHANNELS,
    DEFAULT_QPS,
    ROUTING_POLICIES,
    Routing,
)
from genie.errors import TestbedError, UnitError
from genie.testbed import addressing, shapes
from genie.testbed.model import (
    BUFFER_MAX,
    BUFFER_MIN,
    CONGESTION_DEFAULT,
    DEFAULT_CONTROL_PORT,
    DEFAULT_INTRA_BW,
    DEFAULT_INTRA_LAT,
    DEFAULT_MTU,
    DEFAULT_NETNS_PREFIX,
    MAX_QPS_PER_CONNECTION,
    Host,
    IntraHost,
    Link,
    Nic,
    RdmaSettings,
    Switch,
    TcpSettings,
    Testbed,
)
from genie.testbed.toml_lines import Path, format_path, key_lines, line_of
from genie.units import (
    parse_bandwidth,
    parse_duration,
    parse_fraction,
    parse_ratio,
    parse_size,
)
from genie.wire.liveness import MISSED_BEATS_LIMIT, MISSED_BEATS_MAX, MISSED_BEATS_MIN

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_PREFIX = re.compile(r"^genie-(?:[a-z0-9]{1,4}-)?$")
# ``deploy`` holds SSH and install settings read by genie.deploy.config, not by this loader.
_TOP_KEYS = {
    "testbed",
    "intra_host",
    "topology",
    "hosts",
    "switches",
    "links",
    "deploy",
    "routing",
    "tcp",
    "rdma",
}
_TESTBED_KEYS = {
    "name",
    "kind",
    "transport",
    "netns_prefix",
    "control_port",
    "model",
    "rates",
    "missed_beats",
}
_HOST_KEYS = {"name", "control", "data_addr", "ranks", "nic", "rdma_device", "nics", "rank_nics"}
_HOST_KEYS |= {"faults"}  # lab hosts: opt in to link faults (genie.faults.schedule)
_NIC_KEYS = {"name", "data_addr", "device", "rdma_device"}
MAX_NICS = 64
_LINK_KEYS = {"a", "b", "rate", "mtu", "queue_limit", "latency", "jitter", "loss"}
_TOPO_KEYS = {
    "shape",
    "hosts",
    "leaves",
    "spines",
    "hosts_per_leaf",
    "oversubscription",
    "rate",
    "uplink_rate",
    "mtu",
    "queue_limit",
    "latency",
    "jitter",
    "loss",
    "ranks_per_host",
    "rails",
}
_PLACEHOLDER = re.compile(r"<[^<>]*>")
_MISSING = object()


class _Ctx:
    """Where errors point: the source name and the key-to-line map of its text."""

    def __init__(self, source: str, text: str) -> None:
        self.source = source
        self.lines = key_lines(text)

    def error(self, path: Path, message: str) -> TestbedError:
        line = line_of(self.lines, path)
        where = f"{self.source}:{line}" if line else self.source
        key = format_path(path)
        return TestbedError(f"{where}: {key}: {message}" if key else f"{where}: {message}")

    def table(self, value: Any, path: Path) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(path, f"must be a table, got {type(value).__name__}")
        return value

    def array_of_tables(self, value: Any, path: Path) -> list[dict[str, Any]]:
        if not isinstance(value, list):
            raise self.error(path, f"must be an array of tables ([[{format_path(path)}]])")
        return [self.table(item, (*path, i)) for i, item in enumerate(value)]

    def check_keys(self, table: dict[str, Any], allowed: set[str], path: Path) -> None:
        for key in table:
            if key not in allowed:
                hint = ", ".join(sorted(allowed))
                raise self.error((*path, key), f"unknown key (known: {hint})")

    def get(
        self,
        table: dict[str, Any],
        key: str,
        path: Path,
        types: tuple[type, ...],
        default: Any = _MISSING,
    ) -> Any:
        if key not in table:
            if default is _MISSING:
                raise self.error((*path, key), "is required")
            return default
        value = table[key]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if not ok:
            want = " or ".join(t.__name__ for t in types)
            raise self.error((*path, key), f"must be {want}, got {value!r}")
        if isinstance(value, str) and _PLACEHOLDER.search(value):
            raise self.error((*path, key), f"still holds a placeholder: {value!r}; fill it in")
        return value

    def get_int(
        self, table: dict[str, Any], key: str, path: Path, default: Any = _MISSING, lo: int = 0
    ) -> Any:
        value = self.get(table, key, path, (int,), default)
        if value is not default and value < lo:
            raise self.error((*path, key), f"must be >= {lo}, got {value}")
        return value

    def get_choice(
        self, table: dict[str, Any], key: str, path: Path, choices: tuple[str, ...], default: Any
    ) -> Any:
        value = self.get(table, key, path, (str,), default)
        if value not in choices and value is not default:
            raise self.error((*path, key), f"must be one of {', '.join(choices)}; got {value!r}")
        return value

    def get_rate(self, table: dict[str, Any], key: str, path: Path, default: Any = _MISSING) -> Any:
        value = self.get(table, key, path, (str, int, float), default)
        if value is default:
            return value
        try:
            return parse_bandwidth(value)
        except UnitError as exc:
            raise self.error((*path, key), str(exc)) from None

    def get_size(self, table: dict[str, Any], key: str, path: Path, default: Any = _MISSING) -> Any:
        value = self.get(table, key, path, (str, int), default)
        if value is default:
            return value
        try:
            size = parse_size(value)
        except UnitError as exc:
            raise self.error((*path, key), str(exc)) from None
        if size <= 0:
            raise self.error((*path, key), "must be positive")
        return size

    def get_loss(self, table: dict[str, Any], path: Path) -> float:
        """``loss``: a fraction of packets ("0.1%" or 0.001), below 1."""
        value = self.get(table, "loss", path, (str, int, float), 0.0)
        try:
            loss = parse_fraction(value)
        except UnitError as exc:
            raise self.error((*path, "loss"), str(exc)) from None
        if not 0 <= loss < 1:
            raise self.error((*path, "loss"), f"{value!r}: from 0 to below 100%")
        return loss

    def get_queue(self, table: dict[str, Any], key: str, path: Path, rate: float) -> int | None:
        """A queue depth: bytes ("256KiB", 65536) or time at ``rate`` bytes/s ("2ms")."""
        value = self.get(table, key, path, (str, int), None)
        if value is None:
            return None
        if isinstance(value, str) and re.fullmatch(r"\s*[0-9.]+\s*(ns|us|ms|s)\s*", value):
            try:
                seconds = parse_duration(value)
            except UnitError as exc:
                raise self.error((*path, key), str(exc)) from None
            if seconds <= 0:
                raise self.error((*path, key), "must be positive")
            return max(1, round(seconds * rate))
        return self.get_size(table, key, path, None)

    def get_duration(
        self, table: dict[str, Any], key: str, path: Path, default: Any = _MISSING
    ) -> Any:
        value = self.get(table, key, path, (str, int, float), default)
        if value is default:
            return value
        try:
            return parse_duration(value)
        except UnitError as exc:
            raise self.error((*path, key), str(exc)) from None

    def get_mtu(self, table: dict[str, Any], path: Path, default: int) -> int:
        mtu = self.get_int(table, "mtu", path, default, lo=68)
        if mtu > 65535:
            raise self.error((*path, "mtu"), f"must be <= 65535, got {mtu}")
        return mtu


def load_testbed(path: str | FsPath) -> Testbed:
    """Read and validate the testbed TOML file at ``path``."""
    p = FsPath(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise TestbedError(f"{p}: cannot read testbed file: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise TestbedError(f"{p}: testbed file is not UTF-8 text") from None
    return loads_testbed(text, source=str(p))


def loads_testbed(text: str, source: str = "<testbed>") -> Testbed:
    """Parse and validate testbed TOML ``text``; ``source`` names it in errors."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = str(exc)
        m = re.search(r"\(at line (\d+), column \d+\)", msg)
        if m:
            raise TestbedError(
                f"{source}:{m.group(1)}: invalid TOML: {msg[: m.start()].strip()}"
            ) from None
        raise TestbedError(f"{source}: invalid TOML: {msg}") from None
    return _parse(_Ctx(source, text), data)


def _parse(ctx: _Ctx, data: dict[str, Any]) -> Testbed:
    ctx.check_keys(data, _TOP_KEYS, ())
    if "testbed" not in data:
        raise ctx.error((), "missing the [testbed] table (name, kind)")
    tb = ctx.table(data["testbed"], ("testbed",))
    ctx.check_keys(tb, _TESTBED_KEYS, ("testbed",))
    name = ctx.get(tb, "name", ("testbed",), (str,))
    if not _NAME.match(name):
        raise ctx.error(("testbed", "name"), f"must be 1-32 of A-Z a-z 0-9 _ -; got {name!r}")
    kind = ctx.get_choice(tb, "kind", ("testbed",), ("static", "netns"), _MISSING)
    transport = ctx.get_choice(tb, "transport", ("testbed",), ("tcp", "rdma"), "tcp")
    prefix = ctx.get(tb, "netns_prefix", ("testbed",), (str,), DEFAULT_NETNS_PREFIX)
    if not _PREFIX.match(prefix):
        raise ctx.error(
            ("testbed", "netns_prefix"),
            f"must be 'genie-' or 'genie-TAG-' with TAG 1-4 of a-z 0-9; got {prefix!r}",
        )
    model = ctx.get(tb, "model", ("testbed",), (str,), "")
    rates = ctx.get_choice(tb, "rates", ("testbed",), ("line", "payload"), "line")
    control_port = ctx.get_int(tb, "control_port", ("testbed",), DEFAULT_CONTROL_PORT, lo=1)
    if control_port > 65535:
        raise ctx.error(("testbed", "control_port"), f"must be <= 65535, got {control_port}")
    missed_beats = ctx.get_int(
        tb, "missed_beats", ("testbed",), MISSED_BEATS_LIMIT, lo=MISSED_BEATS_MIN
    )
    if missed_beats > MISSED_BEATS_MAX:
        raise ctx.error(
            ("testbed", "missed_beats"), f"must be <= {MISSED_BEATS_MAX}, got {missed_beats}"
        )
    if kind == "netns" and transport == "rdma":
        raise ctx.error(
            ("testbed", "transport"), "netns testbeds have no RDMA devices; use transport = 'tcp'"
        )
    if kind != "netns" and "netns_prefix" in tb:
        raise ctx.error(("testbed", "netns_prefix"), "only meaningful for kind = 'netns'")

    intra = IntraHost()
    if "intra_host" in data:
        it = ctx.table(data["intra_host"], ("intra_host",))
        ctx.check_keys(it, {"bandwidth", "latency"}, ("intra_host",))
        intra = IntraHost(
            bandwidth=ctx.get_rate(it, "bandwidth", ("intra_host",), DEFAULT_INTRA_BW),
            latency=ctx.get_duration(it, "latency", ("intra_host",), DEFAULT_INTRA_LAT),
        )

    routing = _routing(ctx, data["routing"]) if "routing" in data else Routing()
    tcp = _tcp(ctx, data["tcp"]) if "tcp" in data else TcpSettings()
    rdma = _rdma(ctx, data["rdma"]) if "rdma" in data else RdmaSettings()

    raw_hosts = ctx.array_of_tables(data["hosts"], ("hosts",)) if "hosts" in data else []
    topo = ctx.table(data["topology"], ("topology",)) if "topology" in data else None
    if topo is not None:
        for key in ("switches", "links"):
            if key in data:
                raise ctx.error(
                    (key,), "cannot be given together with [topology] (the shorthand makes them)"
                )
        host_names, switch_names, links, default_ranks, default_nics = _expand(ctx, topo, raw_hosts)
    else:
        if not raw_hosts:
            raise ctx.error(("hosts",), "no hosts: give [[hosts]] entries or a [topology]")
        host_names = []
        for i, h in enumerate(raw_hosts):
            host_names.append(ctx.get(h, "name", ("hosts", i), (str,)))
        raw_sw = ctx.array_of_tables(data["switches"], ("switches",)) if "switches" in data else []
        switch_names = []
        for i, s in enumerate(raw_sw):
            ctx.check_keys(s, {"name"}, ("switches", i))
            switch_names.append(ctx.get(s, "name", ("switches", i), (str,)))
        raw_links = ctx.array_of_tables(data["links"], ("links",)) if "links" in data else []
        links = [_link(ctx, lk, ("links", i)) for i, lk in enumerate(raw_links)]
        default_ranks = default_nics = 1

    _check_names(ctx, host_names, switch_names, topo is not None)
    hosts = _hosts(
        ctx, kind, prefix, control_port, raw_hosts, host_names, default_ranks, default_nics
    )
    switches = [
        Switch(name=s, netns=f"{prefix}{s}" if kind == "netns" else None) for s in switch_names
    ]
    _check_links(ctx, kind, hosts, switch_names, links, topo is not None)
    return Testbed(
        name=name,
        kind=kind,
        transport=transport,
        hosts=hosts,
        switches=switches,
        links=links,
        intra_host=intra,
        netns_prefix=prefix,
        model=model,
        rates=rates,
        routing=routing,
        tcp=tcp,
        rdma=rdma,
        missed_beats=missed_beats,
    )


def _tcp(ctx: _Ctx, raw: Any) -> TcpSettings:
    """``[tcp]``: congestion_control, ecn (off, on, passive), slow_start_after_idle, buffer_max."""
    path = ("tcp",)
    t = ctx.table(raw, path)
    keys = {"congestion_control", "ecn", "slow_start_after_idle", "buffer_max"}
    ctx.check_keys(t, keys, path)
    cc = ctx.get(t, "congestion_control", path, (str,), CONGESTION_DEFAULT)
    if not re.fullmatch(r"[a-z0-9_]{1,15}(,[a-z0-9_]{1,15}){0,3}", cc):
        raise ctx.error((*path, "congestion_control"), f"not an algorithm name: {cc!r}")
    ecn = ctx.get_choice(t, "ecn", path, ("off", "on", "passive"), "passive")
    sst = ctx.get(t, "slow_start_after_idle", path, (bool,), False)
    buf = ctx.get_size(t, "buffer_max", path, None)
    if buf is not None and not BUFFER_MIN <= buf <= BUFFER_MAX:
        raise ctx.error((*path, "buffer_max"), f"{buf} B: from {BUFFER_MIN} B to {BUFFER_MAX} B")
    return TcpSettings(congestion_control=cc, ecn=ecn, slow_start_after_idle=sst, buffer_max=buf)


STALL_MAX_S = 86400  # the agents' bound on the stall watchdog (rdma_conn.check_options)


def _rdma(ctx: _Ctx, raw: Any) -> RdmaSettings:
    """``[rdma]``: qps_per_connection (1..16), stall_s (> 0 s), traffic_class (0..255)."""
    path = ("rdma",)
    t = ctx.table(raw, path)
    ctx.check_keys(t, {"qps_per_connection", "stall_s", "traffic_class"}, path)
    qps = ctx.get(t, "qps_per_connection", path, (int,), 1)
    if not 1 <= qps <= MAX_QPS_PER_CONNECTION:
        raise ctx.error(
            (*path, "qps_per_connection"), f"must be 1..{MAX_QPS_PER_CONNECTION}, got {qps}"
        )
    stall = ctx.get(t, "stall_s", path, (int, float), None)
    if stall is not None and not 0 < stall <= STALL_MAX_S:
        raise ctx.error(
            (*path, "stall_s"), f"must be seconds, > 0 and <= {STALL_MAX_S}, got {stall}"
        )
    tc = ctx.get(t, "traffic_class", path, (int,), None)
    if tc is not None and not 0 <= tc <= 255:
        raise ctx.error((*path, "traffic_class"), f"must be 0..255 (one byte), got {tc}")
    return RdmaSettings(
        qps_per_connection=qps,
        stall_s=None if stall is None else float(stall),
        traffic_class=tc,
    )


def _routing(ctx: _Ctx, raw: Any) -> Routing:
    """``[routing]``: policy (ecmp, spray, pinned), channels, qps, seed, and a path map file
    (``paths``, relative to the testbed file: ``genie.testbed.pathmap``)."""
    path = ("routing",)
    t = ctx.table(raw, path)
    ctx.check_keys(t, {"policy", "channels", "qps", "seed", "paths"}, path)
    paths = ctx.get(t, "paths", path, (str,), "")
    if paths:
        here = FsPath(ctx.source)
        file = (
            FsPath(paths)
            if FsPath(paths).is_absolute() or not here.is_file()
            else here.parent / paths
        )
        if not file.is_file():
            raise ctx.error((*path, "paths"), f"path map {file} does not exist")
        paths = str(file.resolve())
    policy = ctx.get_choice(t, "policy", path, ROUTING_POLICIES, "ecmp")
    channels = ctx.get_int(t, "channels", path, DEFAULT_CHANNELS, lo=1)
    qps = ctx.get_int(t, "qps", path, DEFAULT_QPS, lo=1)
    seed = ctx.get_int(t, "seed", path, 0, lo=0)
    for key, v in (("channels", channels), ("qps", qps)):
        if v > 1024:
            raise ctx.error((*path, key), f"must be <= 1024, got {v}")
    return Routing(policy=policy, channels=channels, qps=qps, seed=seed, paths=paths)


def _link(ctx: _Ctx, lk: dict[str, Any], path: Path) -> Link:
    ctx.check_keys(lk, _LINK_KEYS, path)
    rate = ctx.get_rate(lk, "rate", path)
    return Link(
        a=ctx.get(lk, "a", path, (str,)),
        b=ctx.get(lk, "b", path, (str,)),
        rate=rate,
        mtu=ctx.get_mtu(lk, path, DEFAULT_MTU),
        queue_limit=ctx.get_queue(lk, "queue_limit", path, rate),
        latency=ctx.get_duration(lk, "latency", path, 0.0),
        jitter=ctx.get_duration(lk, "jitter", path, 0.0),
        loss=ctx.get_loss(lk, path),
    )


def _expand(
    ctx: _Ctx, topo: dict[str, Any], raw_hosts: list[dict[str, Any]]
) -> tuple[list[str], list[str], list[Link], int, int]:
    path: Path = ("topology",)
    ctx.check_keys(topo, _TOPO_KEYS, path)
    shape = ctx.get_choice(topo, "shape", path, ("star", "leafspine", "ring", "rail"), _MISSING)
    rate = ctx.get_rate(topo, "rate", path)
    mtu = ctx.get_mtu(topo, path, DEFAULT_MTU)
    queue_limit = ctx.get_queue(topo, "queue_limit", path, rate)
    template = Link(
        a="",
        b="",
        rate=rate,
        mtu=mtu,
        queue_limit=queue_limit,
        latency=ctx.get_duration(topo, "latency", path, 0.0),
        jitter=ctx.get_duration(topo, "jitter", path, 0.0),
        loss=ctx.get_loss(topo, path),
    )
    allowed = {
        "star": {"hosts"},
        "ring": {"hosts"},
        "leafspine": {"leaves", "spines", "hosts_per_leaf", "oversubscription", "uplink_rate"},
        "rail": {"hosts", "rails", "spines", "hosts_per_leaf", "oversubscription", "uplink_rate"},
    }[shape]
    shaped = ("hosts", "leaves", "spines", "hosts_per_leaf", "oversubscription", "uplink_rate")
    for key in (*shaped, "rails"):
        if key in topo and key not in allowed:
            raise ctx.error((*path, key), f"does not apply to shape = {shape!r}")
    rails = ctx.get_int(topo, "rails", path, 1, lo=1) if shape == "rail" else 1
    if shape == "rail" and "rails" not in topo:
        raise ctx.error((*path, "rails"), "is required for shape = 'rail' (NICs per host)")
    if rails > MAX_NICS:
        raise ctx.error((*path, "rails"), f"must be <= {MAX_NICS}, got {rails}")
    ranks = ctx.get_int(topo, "ranks_per_host", path, rails, lo=1)
    if shape == "leafspine":
        leaves = ctx.get_int(topo, "leaves", path, lo=1)
        spines = ctx.get_int(topo, "spines", path, 1, lo=1)
        per_leaf = ctx.get_int(topo, "hosts_per_leaf", path, lo=1)
        n = leaves * per_leaf
    else:
        default_n = len(raw_hosts) if raw_hosts else _MISSING
        n = ctx.get_int(topo, "hosts", path, default_n, lo=1)
        if shape == "ring" and n < 2:
            raise ctx.error((*path, "hosts"), "a ring needs at least 2 hosts")
        if shape == "rail":
            spines = ctx.get_int(topo, "spines", path, 1, lo=1)
            per_leaf = ctx.get_int(topo, "hosts_per_leaf", path, n, lo=1)
            if n % per_leaf:
                raise ctx.error(
                    (*path, "hosts_per_leaf"), f"{n} hosts do not split into groups of {per_leaf}"
                )
    if n > addressing.MAX_HOSTS:
        raise ctx.error(path, f"{n} hosts; at most {addressing.MAX_HOSTS}")
    if raw_hosts and len(raw_hosts) != n:
        raise ctx.error(
            ("hosts",), f"{len(raw_hosts)} [[hosts]] entries but the {shape} topology has {n}"
        )
    names = [
        ctx.get(h, "name", ("hosts", i), (str,), f"h{i}") if raw_hosts else f"h{i}"
        for i, h in enumerate(raw_hosts or [{}] * n)
    ]
    if shape == "star":
        ex = shapes.star(names, template)
    elif shape == "ring":
        ex = shapes.ring(names, template)
    else:
        over = ctx.get(topo, "oversubscription", path, (int, float, str), 1.0)
        try:
            over = parse_ratio(over)
        except UnitError as exc:
            raise ctx.error((*path, "oversubscription"), str(exc)) from None
        default_up = shapes.leafspine_uplink_rate(per_leaf, spines, rate, float(over))
        uplink = ctx.get_rate(topo, "uplink_rate", path, default_up)
        if shape == "rail":
            ex = shapes.rail(names, rails, spines, template, uplink, per_leaf)
        else:
            ex = shapes.leafspine(names, leaves, spines, template, uplink)
    return ex.hosts, ex.switches, ex.links, ranks, ex.nics


def _check_names(ctx: _Ctx, hosts: list[str], switches: list[str], generated: bool) -> None:
    seen: set[str] = set()
    for kind, names in (("hosts", hosts), ("switches", switches)):
        for i, n in enumerate(names):
            if not _NAME.match(n):
                raise ctx.error((kind, i, "name"), f"must be 1-32 of A-Z a-z 0-9 _ -; got {n!r}")
            if n in seen:
                raise ctx.error((kind, i, "name"), f"duplicate name {n!r}")
            seen.add(n)


def _parse_control(ctx: _Ctx, value: str, path: Path) -> tuple[str, int]:
    ip, sep, port = value.rpartition(":")
    ip = ip.strip("[]")
    try:
        ipaddress.ip_address(ip)
        port_n = int(port)
    except ValueError:
        port_n = -1
    if not sep or not 1 <= port_n <= 65535:
        raise ctx.error(path, f"must be 'IP:PORT' (e.g. 10.0.0.1:7000); got {value!r}")
    return ip, port_n


def _hosts(
    ctx: _Ctx,
    kind: str,
    prefix: str,
    control_port: int,
    raw: list[dict[str, Any]],
    names: list[str],
    default_ranks: int,
    default_nics: int = 1,
) -> list[Host]:
    hosts: list[Host] = []
    seen_control: dict[str, int] = {}
    seen_data: dict[str, tuple[int, str]] = {}
    extra_nics = 0  # netns: NICs after each host's first get addresses after all first ones
    for i, name in enumerate(names):
        h = raw[i] if raw else {}
        path: Path = ("hosts", i)
        ctx.check_keys(h, _HOST_KEYS, path)
        control = ctx.get(h, "control", path, (str,), None)
        data_addr = ctx.get(h, "data_addr", path, (str,), None)
        if kind == "netns":
            if control is None:
                control = f"{addressing.control_pair(i, prefix)[1]}:{control_port}"
            if data_addr is None:
                data_addr = addressing.data_ip(i, prefix)
        elif control is None:
            raise ctx.error((*path, "control"), "is required for static testbeds ('IP:PORT')")
        cip, _ = _parse_control(ctx, control, (*path, "control"))
        if data_addr is None:
            data_addr = cip
        _check_ip(ctx, data_addr, (*path, "data_addr"), kind)
        if kind == "netns":
            _check_ip(ctx, cip, (*path, "control"), kind)
            if h.get("nic") is not None or h.get("rdma_device") is not None:
                key = "nic" if "nic" in h else "rdma_device"
                raise ctx.error((*path, key), "netns hosts get their interfaces from genie")
        if control in seen_control:
            raise ctx.error(
                (*path, "control"), f"{control} is also host {seen_control[control]}'s address"
            )
        seen_control[control] = i
        nics = _nics(ctx, kind, prefix, h, path, data_addr, default_nics, len(names) + extra_nics)
        extra_nics += max(0, len(nics) - 1)
        if nics:
            data_addr = nics[0].data_addr
        ranks = ctx.get_int(h, "ranks", path, default_ranks, lo=1)
        rank_nics = _rank_nics(ctx, h, path, ranks, max(1, len(nics)))
        addrs = [n.data_addr for n in nics] if nics else [data_addr]
        for k, a in enumerate(addrs):
            if a in seen_data and (kind == "netns" or seen_data[a][0] == i):
                j = seen_data[a][0]
                where = (*path, "nics", k, "data_addr") if nics else (*path, "data_addr")
                raise ctx.error(
                    where, f"{a} is also {'another NIC' if j == i else f'host {j}'}'s address"
                )
            seen_data[a] = (i, name)
        hosts.append(
            Host(
                name=name,
                control=control,
                data_addr=data_addr,
                ranks=ranks,
                nic=ctx.get(h, "nic", path, (str,), None),
                rdma_device=ctx.get(h, "rdma_device", path, (str,), None),
                netns=f"{prefix}{name}" if kind == "netns" else None,
                nics=nics,
                rank_nics=rank_nics,
                faults=ctx.get(h, "faults", path, (bool,), False),
            )
        )
    return hosts


def _check_ip(ctx: _Ctx, ip: str, path: Path, kind: str) -> None:
    try:
        ipaddress.ip_address(ip)
    except ValueError:
        raise ctx.error(path, f"not an IP address: {ip!r}") from None
    if kind == "netns" and not addressing.in_emulation_net(ip):
        raise ctx.error(path, f"netns testbeds use 198.18.0.0/15 only; got {ip}")


def _nics(
    ctx: _Ctx,
    kind: str,
    prefix: str,
    h: dict[str, Any],
    path: Path,
    data_addr: str,
    default_nics: int,
    next_index: int,
) -> list[Nic]:
    """``nics`` of a host: a count or an array of tables; [] for a host with one NIC."""
    raw = h.get("nics", default_nics)
    npath = (*path, "nics")
    if isinstance(raw, int) and not isinstance(raw, bool):
        if not 1 <= raw <= MAX_NICS:
            raise ctx.error(npath, f"must be 1..{MAX_NICS}, got {raw}")
        tables: list[dict[str, Any]] = [{} for _ in range(raw)]
    else:
        tables = ctx.array_of_tables(raw, npath)
        if not 2 <= len(tables) <= MAX_NICS:
            raise ctx.error(
                npath, f"list 2..{MAX_NICS} NICs (a host with one NIC gives data_addr and nic)"
            )
    if len(tables) == 1:
        return []
    if default_nics > 1 and len(tables) != default_nics:
        raise ctx.error(npath, f"the topology gives every host {default_nics} NICs")
    for key in ("nic", "rdma_device"):
        if key in h:
            raise ctx.error((*path, key), "give it per NIC ([[hosts.nics]]) on a host with NICs")
    out: list[Nic] = []
    extra = 0
    for k, t in enumerate(tables):
        p = (*npath, k)
        ctx.check_keys(t, _NIC_KEYS, p)
        name = ctx.get(t, "name", p, (str,), f"nic{k}")
        if not _NAME.match(name) or any(n.name == name for n in out):
            raise ctx.error(
                (*p, "name"), f"must be a new name of 1-32 of A-Z a-z 0-9 _ -: {name!r}"
            )
        if kind == "netns":
            for key in ("data_addr", "device", "rdma_device"):
                if key in t:
                    raise ctx.error((*p, key), "netns NICs get their addresses from genie")
            addr = data_addr if k == 0 else addressing.data_ip(next_index + extra, prefix)
            extra += k > 0
        else:
            addr = ctx.get(t, "data_addr", p, (str,), data_addr if k == 0 else _MISSING)
            _check_ip(ctx, addr, (*p, "data_addr"), kind)
        out.append(
            Nic(
                name=name,
                data_addr=addr,
                device=ctx.get(t, "device", p, (str,), None),
                rdma_device=ctx.get(t, "rdma_device", p, (str,), None),
            )
        )
    return out


def _rank_nics(ctx: _Ctx, h: dict[str, Any], path: Path, ranks: int, n_nics: int) -> list[int]:
    """``rank_nics``: the NIC of each of the host's ranks (default: rank i on NIC i mod n)."""
    if "rank_nics" not in h:
        return []
    value = ctx.get(h, "rank_nics", path, (list,))
    key = (*path, "rank_nics")
    if len(value) != ranks:
        raise ctx.error(key, f"lists {len(value)} NICs for {ranks} ranks")
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < n_nics:
            raise ctx.error(key, f"NIC indices are 0..{n_nics - 1}; got {v!r}")
    return list(value)


def _check_links(
    ctx: _Ctx,
    kind: str,
    hosts: list[Host],
    switches: list[str],
    links: list[Link],
    generated: bool,
) -> None:
    endpoints = [e for h in hosts for e in h.endpoints()]
    nodes = set(endpoints) | set(switches)
    multi = {h.name: h for h in hosts if h.nics}
    where = ("topology",) if generated else None
    adj: dict[str, set[str]] = {n: set() for n in nodes}
    seen: set[frozenset[str]] = set()
    for i, lk in enumerate(links):
        path = where or ("links", i)
        for end in ("a", "b"):
            val = getattr(lk, end)
            if val in multi:
                raise ctx.error(
                    path if generated else (*path, end),
                    f"host {val!r} has {multi[val].n_nics} NICs: link them by name "
                    f"({', '.join(multi[val].endpoints()[:2])}, ...)",
                )
            if val not in nodes:
                raise ctx.error(
                    path if generated else (*path, end), f"no host or switch named {val!r}"
                )
        if lk.a == lk.b:
            raise ctx.error(path, f"links {lk.a!r} to itself")
        pair = frozenset((lk.a, lk.b))
        if pair in seen:
            raise ctx.error(path, f"a second link between {lk.a!r} and {lk.b!r}")
        seen.add(pair)
        if lk.queue_limit is not None and lk.queue_limit < lk.mtu:
            raise ctx.error(
                ("topology", "queue_limit") if generated else (*path, "queue_limit"),
                f"queue_limit {lk.queue_limit} B is below the MTU {lk.mtu} B",
            )
        adj[lk.a].add(lk.b)
        adj[lk.b].add(lk.a)
    if kind == "netns":
        _check_netns_links(ctx, hosts, switches, adj, where or ("links",))
    if len(endpoints) > 1:
        start = endpoints[0]
        reach = {start}
        todo = [start]
        while todo:
            for nxt in adj[todo.pop()]:
                if nxt not in reach:
                    reach.add(nxt)
                    todo.append(nxt)
        for i, h in enumerate(hosts):
            lost = [e for e in h.endpoints() if e not in reach]
            if lost:
                raise ctx.error(
                    where or ("hosts", i),
                    f"host {lost[0]!r} is not connected to host {start!r} by links",
                )


def _check_netns_links(
    ctx: _Ctx,
    hosts: list[Host],
    switches: list[str],
    adj: dict[str, set[str]],
    path: Path,
) -> None:
    """Rules of netns emulation: every NIC has one uplink; hosts form a ring or sit on switches.

    Switches are Linux bridges for a star (one switch, one NIC per host) and routers (L3, ECMP
    over equal-cost paths) otherwise, so loops between switches (several spines) are fine.
    """
    sw = set(switches)
    ring = False
    for h in hosts:
        for e in h.endpoints():
            n_sw = len(adj[e] & sw)
            if n_sw > 1:
                raise ctx.error(path, f"netns host {e!r} has {n_sw} switch links; at most 1")
            if n_sw and adj[e] - sw:
                raise ctx.error(path, f"netns host {e!r} links to both a switch and hosts")
            if h.nics and not n_sw:
                raise ctx.error(path, f"netns NIC {e!r} needs a link to a switch")
            ring = ring or bool(adj[e] - sw)
    if ring and switches:
        raise ctx.error(
            path, "a netns testbed is either hosts linked in a ring or hosts on switches, not both"
        )
