"""What NCCL-like system a published configuration is, and both models' time for each row.

A configuration of the published data files (``docs/validation/*.toml``) states its hardware
as fields: ``gpu`` (the GPU model), ``intra`` (nvswitch, nvlink-bridge, pcie, xgmi, none),
``nic_kind`` (ib, roce, efa, tcp, none), ``nics_per_node`` and ``nic_gbps`` (line rate of one
NIC, Gb/s), beside the line-rate model's table (hosts, ranks per host, intra-host rate).
``system_of`` turns them into a ``genie.collectives.nccl_model.System`` by one rule for every
configuration (nothing is fitted per configuration):

* the GPU's generation picks NCCL's constants (``GENERATIONS``; AMD GPUs are priced with
  Hopper's, an assumption: RCCL's own tuning differs and is not modelled, except the latency of
  a network step, RCCL's own, ``System.rccl``);
* NVLink (NVSwitch or bridges): the stated rate per GPU and direction scaled to what NCCL's
  topology code counts per link for the generation (``src/graph/topo.h``); xGMI to what RCCL's
  counts (``gpu_presets.XGMI_FRACTION``); PCIe at the stated rate; NVLink SHARP (NVLS) where an
  NVSwitch node has a Hopper or later GPU;
* the node's network: NICs x rate, less the transport's packet headers
  (``gpu_presets.net_payload_fraction``); its latency per step NCCL's, or the transport's own
  where its NCCL plugin publishes one (EFA, ``gpu_presets.net_step_latency``); a GPU's link to
  its NICs is PCIe Gen3 (Volta), Gen4 (Ampere and Ada) or Gen5 x16 (later);
* channels: the generation's count on one node; across nodes two per NIC (NCCL opens two
  channels per network device), between 2 and that count; NCCL_MIN_CTAS / NCCL_MAX_CTAS
  (or _NCHANNELS) in the command bound it as NCCL's config does;
* ``NCCL_ALGO`` / ``NCCL_PROTO`` in the command are honoured where they name modelled choices,
  and so is an algorithm the source names as the one that ran (``nccl_algorithm`` starting with
  its name);
* the NCCL release a source states (``nccl_version``, NVIDIA only) selects its tuner constants
  (``genie.collectives.nccl_releases``); none stated: the latest;
* how nccl-tests launched: one process driving several GPUs (``-g N``, ``nGpus N``) cannot run
  collectives faster than N host launches each, and graphs (``-G``) save the launch NCCL's base
  latency holds (``nccl_model.launch_bound``, CUDA's or HIP's launch by the GPU's vendor).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from genie.calibration.accuracy import error_pct
from genie.collectives import gpu_presets as P
from genie.collectives import nccl_model as N
from genie.errors import CalibrationError
from genie.units import parse_bandwidth
from genie.vocabulary import bus_factor

#: GPU model (prefix, case-insensitive) -> NCCL's generation, first match wins.
GENERATIONS: tuple[tuple[str, P.Tuning], ...] = (
    ("GB200", "blackwell"),
    ("GB300", "blackwell"),
    ("B300", "blackwell"),
    ("GB10", "blackwell"),
    ("B200", "blackwell"),
    ("B100", "blackwell"),
    ("H100", "hopper"),
    ("H200", "hopper"),
    ("H800", "hopper"),
    ("H20", "hopper"),
    ("GH200", "hopper"),
    ("MI", "hopper"),  # AMD Instinct: priced with Hopper's constants (an assumption)
    ("A100", "ampere"),
    ("A800", "ampere"),
    ("A30", "ampere"),
    ("A40", "ampere"),
    ("A6000", "ampere"),
    ("RTX", "ampere"),
    ("L40", "ampere"),  # Ada (SM89): NCCL's compute-capability index is Ampere's
    ("L4", "ampere"),
    ("V100", "volta"),
)
#: NCCL's NVLink bandwidth per link (topo.h) over the link's line rate, per generation.
NVLINK_FRACTION: dict[str, float] = {
    "volta": 20.0 / 25.0,
    "ampere": 20.0 / 25.0,
    "hopper": 20.6 / 25.0,
    "blackwell": 40.1 / 50.0,
}
#: NCCL's default channel count on one node per generation (rings NCCL's search finds there).
NODE_CHANNELS: dict[str, int] = {"volta": 12, "ampere": 16, "hopper": 16, "blackwell": 32}
PCIE3_X16 = 8e9 * 16 * 128 / 130 / 8
INTRA_LINKS: dict[str, P.IntraLink] = {
    "nvswitch": "nvlink",
    "nvlink-bridge": "nvlink",
    "nvlink": "nvlink",
    "pcie": "pci",
    "xgmi": "xgmi",
    "none": "nvlink",
}
NIC_KINDS = ("ib", "roce", "efa", "tcp", "none")
CLASSES = ("<= 64 KiB", "64 KiB - 64 MiB", ">= 64 MiB")


def generation(gpu: str) -> P.Tuning:
    """NCCL's generation of a GPU model name; a one-line error for one it does not know."""
    name = gpu.strip().upper()
    for prefix, gen in GENERATIONS:
        if name.startswith(prefix.upper()):
            return gen
    raise CalibrationError(f"GPU {gpu!r}: no NCCL generation known for it")


def _field(cfg: dict[str, Any], key: str) -> Any:
    if key not in cfg:
        raise CalibrationError(f"{cfg.get('id', '?')}: field {key!r} missing")
    return cfg[key]


def system_of(cfg: dict[str, Any]) -> tuple[N.System, str | None, str | None, str]:
    """(system, NCCL_ALGO, NCCL_PROTO, note) of one configuration, by the module's rule."""
    m = cfg["model"]
    gen = generation(str(_field(cfg, "gpu")))
    intra = str(_field(cfg, "intra")).lower()
    kind = str(_field(cfg, "nic_kind")).lower()
    if intra not in INTRA_LINKS:
        raise CalibrationError(f"{cfg['id']}: intra {intra!r}: one of {', '.join(INTRA_LINKS)}")
    if kind not in NIC_KINDS:
        raise CalibrationError(f"{cfg['id']}: nic_kind {kind!r}: one of {', '.join(NIC_KINDS)}")
    nodes, gpus = int(m["hosts"]), int(m.get("ranks_per_host", 1))
    link = INTRA_LINKS[intra]
    intra_line = parse_bandwidth(m.get("intra_bandwidth", m["link_rate"]))
    intra_bw = intra_line
    if link == "nvlink":
        intra_bw = intra_line * NVLINK_FRACTION[gen]
    elif link == "xgmi":
        mi200 = str(cfg["gpu"]).upper().startswith("MI2")
        intra_bw = intra_line * (P.XGMI_FRACTION_MI200 if mi200 else P.XGMI_FRACTION)
    nics, gbps = int(cfg.get("nics_per_node", 0)), float(cfg.get("nic_gbps", 0))
    if nodes > 1 and not (nics > 0 and gbps > 0 and kind != "none"):
        raise CalibrationError(f"{cfg['id']}: {nodes} nodes need nics_per_node, nic_gbps, nic_kind")
    net_line = nics * gbps * 1e9 / 8 if nics and gbps else parse_bandwidth(m["link_rate"])
    payload = P.net_payload_fraction(kind if kind != "none" else "ib")  # type: ignore[arg-type]
    pcie = {"volta": PCIE3_X16, "ampere": P.PCIE4_X16}.get(gen, P.PCIE5_X16)
    hw = f"{cfg.get('hardware', '')}"
    cpu: P.Cpu = "amd" if re.search(r"\bEPYC\b|\bAMD\b", hw) else "intel"
    channels = NODE_CHANNELS[gen]
    if nodes > 1:
        channels = max(2, min(channels, 2 * nics))
    channels = _channel_bounds(f"{cfg.get('command', '')}", channels)
    step = P.net_step_latency(kind)
    system = N.System(
        nodes=nodes,
        gpus_per_node=gpus,
        intra_bw=intra_bw,
        net_bw=net_line * payload,
        gpu_net_bw=pcie,
        tuning=gen,
        intra_link=link,
        cpu=cpu,
        channels=channels,
        nvls=intra == "nvswitch" and gen in ("hopper", "blackwell"),
        net_step_s=None if step is None else step[0],
        net_simple_extra_s=0.0 if step is None else step[1],
        ll128=N.ll128_by_default(vendor(cfg), str(cfg["gpu"])),
        # the NCCL release the source states (nccl_releases; System refuses one for RCCL)
        nccl_release=cfg.get("nccl_version"),
        rccl=vendor(cfg) == "amd",  # RCCL's network step latencies (nccl_model)
    )
    cmd = f"{cfg.get('command', '')} {cfg.get('nccl_algorithm', '')} {cfg.get('note', '')}"
    algo = re.search(r"NCCL_ALGO=\^?([\w,]+)", cmd)
    proto = re.search(r"NCCL_PROTO=(\^?[\w,]+)", cmd)
    stated = re.match(
        r"\s*(nvlstree|nvls|ring|tree|pat)\b", str(cfg.get("nccl_algorithm", "")), re.I
    )
    note = ""
    forced_algo = None
    if not algo and stated:  # the source says which algorithm ran: price that one
        forced_algo = stated.group(1).lower()
    if algo:
        names = [a.lower() for a in algo.group(1).split(",")]
        if all(a in N.ALGORITHMS for a in names) and not algo.group(0).count("^"):
            forced_algo = ",".join(names)
        else:
            note = f"{algo.group(0)} is not modelled: NCCL's choice priced"
    return system, forced_algo, proto.group(1) if proto else None, note


def _channel_bounds(command: str, channels: int) -> int:
    """``channels`` within the bounds the command sets: NCCL_MIN_CTAS / NCCL_MIN_NCHANNELS
    raise it, NCCL_MAX_CTAS / NCCL_MAX_NCHANNELS lower it (NCCL's config, a CTA per channel),
    within the model's 1..64."""
    for name, bound in (("MIN", max), ("MAX", min)):
        for m in re.finditer(rf"NCCL_{name}_(?:CTAS|NCHANNELS)=(\d+)", command):
            channels = bound(channels, int(m.group(1)))
    return max(1, min(64, channels))


def graph_launch(cfg: dict[str, Any]) -> bool:
    """Whether nccl-tests launched from graphs (``-G N``, N > 0)."""
    graph = re.search(r"(?<![\w-])-G\s*(\d+)", f"{cfg.get('command', '')}")
    return bool(graph and int(graph.group(1)) > 0)


def vendor(cfg: dict[str, Any]) -> str:
    """The GPU's vendor: amd for AMD Instinct (MI...), else nvidia."""
    return "amd" if str(cfg.get("gpu", "")).strip().upper().startswith("MI") else "nvidia"


def gpus_per_thread(cfg: dict[str, Any]) -> int:
    """GPUs one nccl-tests thread launched on (``-g N`` or a printed ``nGpus N``; ``-g <GPUs on
    the host>``: the ranks per host)."""
    cmd = f"{cfg.get('command', '')}"
    if re.search(r"-g\s*<GPUs on the host>", cmd):
        return int(cfg["model"].get("ranks_per_host", 1))
    m = re.search(r"(?<![\w-])-g\s*(\d+)", cmd) or re.search(r"nGpus\s+(\d+)", cmd)
    return int(m.group(1)) if m else 1


def healthy(cfg: dict[str, Any]) -> bool:
    """False for configurations the data file marks as misconfigured or limited."""
    return bool(cfg.get("healthy", True))


def size_class(size: int) -> str:
    """Which of CLASSES a size (bytes) falls in."""
    if size <= 64 << 10:
        return CLASSES[0]
    return CLASSES[2] if size >= 64 << 20 else CLASSES[1]


@dataclass(frozen=True)
class ModelRow:
    """One published row with both models' times (seconds)."""

    config: str
    size: int
    published_s: float
    line_rate_s: float
    nccl: N.Prediction
    healthy: bool
    note: str = ""

    @property
    def size_class(self) -> str:
        """Which of CLASSES the row's size falls in."""
        return size_class(self.size)

    @property
    def line_rate_err(self) -> float:
        """Line-rate model's error, percent of the published time."""
        return float(error_pct(self.line_rate_s, self.published_s) or 0.0)

    @property
    def nccl_err(self) -> float:
        """NCCL-like model's error, percent of the published time."""
        return float(error_pct(self.nccl.time_s, self.published_s) or 0.0)


def sendrecv_system(system: N.System) -> N.System:
    """nccl-tests' sendrecv on ``system`` as the model's one pair: every rank sends to the next
    at once, so the slowest pair is a GPU to its neighbour on the same node, or (several nodes)
    a GPU across the network on its share of the node's NICs."""
    if system.nodes == 1:
        return system.with_ranks(1, 2)
    g = system.gpus_per_node
    return replace(system, nodes=2, gpus_per_node=1, net_bw=system.net_bw / g)


def price_both(cfg: dict[str, Any]) -> list[ModelRow]:
    """Every published row of ``cfg`` priced by the line-rate and the NCCL-like model."""
    from genie.calibration.published import price_config

    system, algo, proto, note = system_of(cfg)
    coll = N.canonical(cfg.get("collective", "all_reduce"))
    if coll == "send_recv":
        system = sendrecv_system(system)
    factor = bus_factor(coll, int(cfg["ranks"]))
    per_thread = gpus_per_thread(cfg)
    out: list[ModelRow] = []
    for spec, line in zip(cfg["rows"], price_config(cfg), strict=True):
        size = int(spec["size"])
        if "time_us" in spec:
            pub = float(spec["time_us"]) * 1e-6
        else:
            pub = size * factor / (float(spec["busbw_GBps"]) * 1e9)
        pred = N.choose(coll, size, system, algo, proto)
        pred = N.launch_bound(pred, per_thread, vendor(cfg), graph_launch(cfg))
        out.append(ModelRow(cfg["id"], size, pub, line.genie_s, pred, healthy(cfg), note))
    return out
