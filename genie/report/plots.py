"""Draw the figure dicts of ``genie.report.data`` as PNG files (matplotlib, Agg backend)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genie.extras import require
from genie.units import format_bytes

DPI = 150
#: one style for every figure: a two-column paper's full text width (7 in), fonts that read at
#: that width in print; colours per configuration are the series' own ("C0", "C1", ...)
SIZE_IN = (7.0, 3.6)
STYLE = {
    "font.size": 8,
    "axes.titlesize": 9,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "figure.titlesize": 9,
}
TITLE_CHARS = 95  # a title wraps at this many characters (9 pt at 7 in)
ROLE_COLOURS = {
    "compute": "#4c72b0",
    "exposed_comm": "#dd8452",
    "comm": "#dd8452",
    "wait": "#c44e52",
    "idle": "#b0b0b0",
    "other": "#8c8c8c",
    "TP": "#4c72b0",
    "PP": "#55a868",
    "DP": "#dd8452",
    "EP": "#8172b2",
}


def _plt():
    matplotlib = require("matplotlib", "report")
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _size_axis(ax, xs: list[int]) -> None:
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    ax.set_xscale("log", base=2)
    lo, hi = min(xs), max(xs)
    ticks, t = [], 1
    while t <= hi * 1.0001:
        if t >= lo / 1.0001:
            ticks.append(t)
        t *= 2
    if len(ticks) < 2:  # a narrow sweep: label the sizes themselves
        ticks = sorted(set(xs))
        ax.set_xlim(lo / 1.5, hi * 1.5)
    if len(ticks) > 12:  # keep about ten labels
        step = -(-len(ticks) // 10)
        ticks = ticks[::step]
    if ticks:
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _p: format_bytes(v).replace(".0 ", " ")))
    ax.set_xlabel("message size, whole buffer (bytes; KiB = 2^10 B, MiB = 2^20 B)")


TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def time_unit(vmax: float) -> tuple[float, str]:
    """(seconds per unit, unit name) that shows ``vmax`` seconds as a number of 1 to 999."""
    for scale, name in TIME_UNITS:
        if vmax >= scale:
            return scale, name
    return TIME_UNITS[-1]


def _seconds_axis(axis, label: str, vmax: float | None = None) -> tuple[float, str]:
    """Ticks and label in one time unit chosen from the axis range: ``label (ms)``, ticks 0.5,
    1, 1.5 (never a label in seconds over ticks in ms). Returns (scale, unit)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    if vmax is None:
        vmax = max(abs(v) for v in axis.get_view_interval())
    scale, unit = time_unit(vmax)
    fmt = FuncFormatter(lambda v, _p: f"{v / scale:g}")
    axis.set_major_formatter(fmt)
    if axis.get_scale() == "log":
        lo, hi = sorted(abs(v) for v in axis.get_view_interval())
        # two decades or less show one or two major ticks: label the minor 2s and 5s too, in
        # the same unit (never a lone "10" on a log axis)
        few = lo > 0 and hi / lo < 100

        def minor(v: float, _p) -> str:
            lead = f"{v:e}"[0]
            return f"{v / scale:g}" if few and lead in "25" else ""

        axis.set_minor_formatter(FuncFormatter(minor) if few else NullFormatter())
    axis.set_label_text(f"{label} ({unit})")
    axis.genie_unit = unit  # what the ticks are in, for the figure's record (``_record``)
    return scale, unit


BAND_POINTS = 4  # a min..max band from this many sizes on; fewer: error bars


def _sweep(ax, fig: dict[str, Any]) -> None:
    xs = [x for s in fig["series"] for x in s["x"]]
    colours: dict[str, Any] = {}
    cycle = iter(f"C{i}" for i in range(100))
    for s in fig["series"]:
        key = s["label"].rsplit(":", 1)[0]
        c = colours.setdefault(key, next(cycle))
        scale = 1e-9 if fig["y"]["unit"] == "bytes/s" else 1.0
        ys = [v * scale for v in s["y"]]
        if s["role"] == "model":
            style = "--" if len(ys) > 1 else "x"  # one size: a cross, a line would not show
            ax.plot(s["x"], ys, style, color=c, lw=1.6, ms=8, label=s["label"])
        else:
            ax.plot(s["x"], ys, "o-", color=c, lw=1.8, ms=5, label=s["label"])
            if "y_min" in s and len(ys) >= BAND_POINTS:
                ax.fill_between(s["x"], s["y_min"], s["y_max"], color=c, alpha=0.15, lw=0)
            elif "y_min" in s:  # few sizes: the min..max range as error bars (a band between
                # two sizes would draw a triangle that no measurement made)
                err = [
                    [y - lo for y, lo in zip(ys, s["y_min"], strict=True)],
                    [hi - y for y, hi in zip(ys, s["y_max"], strict=True)],
                ]
                ax.errorbar(s["x"], ys, yerr=err, color=c, capsize=4, lw=1, ls="none")
    _size_axis(ax, xs)
    if fig["y"]["unit"] == "bytes/s":
        ax.set_ylabel("bus bandwidth (GB/s, 1 GB = 10^9 bytes)")
        ax.yaxis.genie_unit = "GB/s"
        ax.genie_yscale = 1e-9  # drawn in GB/s, the data in bytes/s
        pos = [v * 1e-9 for s in fig["series"] for v in s["y"] if v > 0]
        if pos and max(pos) / min(pos) > 50:  # model far above measured: log keeps both legible
            ax.set_yscale("log")
        else:  # headroom above the highest point (flat busbw sat on the axis's top edge)
            ax.set_ylim(0, max(pos) * 1.15 if pos else None)
    else:
        ax.set_yscale("log")
        few = max((len(s["x"]) for s in fig["series"] if "y_min" in s), default=0) < BAND_POINTS
        spread = "bars" if few else "band"
        _seconds_axis(ax.yaxis, f"time per collective, p50; {spread} = min..max")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _model_error(ax, fig: dict[str, Any]) -> None:
    """Model error (percent) vs size: nominal dashed, calibrated solid, 0 % marked."""
    xs = [x for s in fig["series"] for x in s["x"]]
    for i, s in enumerate(fig["series"]):
        style = "s--" if s["role"] == "nominal" else "o-"
        ax.plot(s["x"], s["y"], style, color=f"C{i}", lw=1.6, ms=5, label=s["label"])
    ax.axhline(0.0, color="k", lw=0.8)
    _size_axis(ax, xs)
    ax.set_ylabel("(model - measured) / measured (%)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _bars(ax, fig: dict[str, Any]) -> None:
    s = fig["series"][0]
    ax.barh(range(len(s["x"])), s["y"], height=0.6, color="C0")
    ax.set_yticks(range(len(s["x"])), [str(v) for v in s["x"]], fontsize=8)
    ax.invert_yaxis()
    right = list(s["y"])  # where each row's value label goes: past its bar and its markers
    for extra in fig["series"][1:]:
        pos = [s["x"].index(x) for x in extra["x"]]
        ax.plot(extra["y"], pos, "kx", ms=7, label=extra["label"])
        for i, v in zip(pos, extra["y"], strict=True):
            right[i] = max(right[i], v)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.18))
    ax.set_xlim(0, max(right or [1]) * 1.25)
    scale, unit = _seconds_axis(ax.xaxis, "iteration time")
    for i, v in enumerate(s["y"]):
        ax.text(right[i], i, f"  {v / scale:.4g} {unit}", va="center", fontsize=8)
    ax.set_ylabel("network backend")
    ax.grid(True, axis="x", alpha=0.3)


def _stacked(ax, fig: dict[str, Any]) -> None:
    bottom = None
    xs0 = fig["series"][0]["x"] if fig["series"] else []
    named = bool(xs0) and isinstance(xs0[0], str)  # configurations: one slot each, by position
    for s in fig["series"]:
        kw: dict[str, Any] = {"bottom": bottom} if bottom is not None else {}
        where = list(range(len(s["x"]))) if named else s["x"]
        ax.bar(where, s["y"], color=ROLE_COLOURS.get(s["role"]), label=s["label"], **kw)
        prev = bottom or [0.0] * len(s["y"])
        bottom = [a + b for a, b in zip(prev, s["y"], strict=True)]
    top = fig.get("iteration_s")
    if top is not None:
        ax.axhline(top, color="k", lw=0.8, ls=":", label="iteration time")
    ax.set_ylim(0, max([top or 0.0, *bottom]) * 1.08 if bottom else 1)
    _seconds_axis(ax.yaxis, fig["y"]["label"])
    ax.set_xlabel(fig["x"]["label"])
    n = len(fig["series"][0]["x"]) if fig["series"] else 0
    if n <= 32:
        import textwrap

        xs = fig["series"][0]["x"]
        ax.set_xticks(range(n) if isinstance(xs[0], str) else xs)
        if isinstance(xs[0], str):  # configuration names: wrapped, never overlapping
            ax.set_xticklabels([textwrap.fill(x, 22) for x in xs], fontsize=8)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _timeline(ax, fig: dict[str, Any]) -> None:
    lanes = fig["series"]
    for i, s in enumerate(lanes):
        if fig["kind"] == "rank_timeline":
            order = [("compute", 0.0, 0.45), ("comm", 0.45, 0.35), ("wait", 0.8, 0.15)]
            for role, off, h in order:
                spans = s["spans"].get(role, [])
                if spans:
                    ax.broken_barh(spans, (i + off - 0.5, h), color=ROLE_COLOURS[role])
        else:
            ax.broken_barh(s["waits"], (i - 0.1, 0.2), color=ROLE_COLOURS["wait"])
            ax.broken_barh(s["spans"], (i - 0.35, 0.7), color=ROLE_COLOURS["comm"])
    ax.set_yticks(range(len(lanes)), [s["label"] for s in lanes], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, fig["iteration_s"] * 1.02 or 1)
    _seconds_axis(ax.xaxis, fig["x"]["label"])
    from matplotlib.patches import Patch

    if fig["kind"] == "rank_timeline":
        present = {r for s in lanes for r, v in s["spans"].items() if v}
        roles = [r for r in ("compute", "comm", "wait") if r in present]
    else:
        roles = ["comm", "wait"]
    names = {"compute": "compute", "comm": "communication", "wait": "waiting for peers"}
    ax.legend(
        handles=[Patch(color=ROLE_COLOURS[r], label=names[r]) for r in roles],
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
    )
    ax.grid(True, axis="x", alpha=0.3)


def _grouped(ax, fig: dict[str, Any], legend: bool = True) -> None:
    """Bars side by side: one group per metric (or x value), one bar per configuration."""
    import numpy as np

    groups = fig["groups"]
    series = fig["series"]
    bar_sets: list = []
    width = 0.8 / max(1, len(series))
    x = np.arange(len(groups))
    for i, s in enumerate(series):
        ys = [np.nan if v is None else v for v in s["y"]]
        pos = x - 0.4 + width * (i + 0.5)
        bars = ax.bar(pos, ys, width * 0.95, color=s.get("color", f"C{i}"), label=s["label"])
        if s.get("hatch"):
            for b in bars:
                b.set_hatch(s["hatch"])
        bar_sets.append((bars, ys))
    ax.set_xticks(x, [str(g) for g in groups], fontsize=8)
    # every panel of a figure on one scale: the tallest bar of any panel sets the limit
    top = fig.get("vmax") or max((v for s in series for v in s["y"] if v is not None), default=1.0)
    ax.set_ylim(0, top * 1.15 or 1)
    scale, _unit = _seconds_axis(ax.yaxis, fig["y"]["label"], fig.get("vmax"))
    if len(series) * len(groups) <= 8:  # few bars: their values on top
        for bars, ys in bar_sets:
            ax.bar_label(bars, [f"{v / scale:.3g}" if v == v else "" for v in ys], fontsize=7)
    if fig.get("x", {}).get("label"):
        ax.set_xlabel(fig["x"]["label"])
    ax.grid(True, axis="y", alpha=0.3)
    if legend:  # below the plot: configuration names are long
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.12), frameon=False)


def _small_multiples(fig: dict[str, Any], plt) -> Any:
    """One panel per combination of the leading keys, grouped bars along the last key."""
    panels = fig["panels"]
    n = len(panels)
    cols = min(3, n)
    rows = -(-n // cols)
    f, axes = plt.subplots(
        rows, cols, figsize=(SIZE_IN[0], 2.4 * rows + 1.0), dpi=DPI, sharey=True,
        squeeze=False,
    )  # fmt: skip
    vmax = max((v for p in panels for s in p["series"] for v in s["y"] if v is not None), default=1)
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.set_visible(False)
            continue
        p = panels[k]
        sub = {**fig, "groups": p["x"], "series": p["series"], "vmax": vmax}
        _grouped(ax, sub, legend=False)
        ax.set_title(p["title"], fontsize=8)
    for k, ax in enumerate(axes.flat[:n]):  # after every panel: shared axes end up as one
        _record(fig, ax, panel=k)
        if k % cols:
            ax.set_ylabel("")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    f.suptitle(_wrap(fig["title"]), x=0.01, ha="left")
    f.tight_layout()
    # below the panels, never over the title
    f.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=len(labels))
    return f


FAULT_COLOURS = ("#e15759", "#f28e2b", "#b07aa1", "#59a14f", "#edc948", "#76b7b2")


def _fault_timeline(ax, fig: dict[str, Any]) -> None:
    """Each iteration at its start (dot) for its duration (line to its end) at the height of
    its duration; fault windows shaded and numbered, planned edges dashed where they differ."""
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory

    curves: dict[str, str] = {}
    for s in fig["series"]:
        c = curves.setdefault(s["curve"], f"C{len(curves)}")
        warm = s["role"] == "warmup"
        ends = [x + y for x, y in zip(s["x"], s["y"], strict=True)]
        ax.hlines(s["y"], s["x"], ends, color=c, lw=1.0, alpha=0.5 if warm else 0.9)
        ax.scatter(
            s["x"], s["y"], s=16, marker="o", label=s["label"], zorder=3,
            facecolors="none" if warm else c, edgecolors=c,
        )  # fmt: skip
    ys = [v for s in fig["series"] for v in s["y"] if v > 0]
    if ys and max(ys) / min(ys) > 20:  # a fault can stretch an iteration 100x: keep both legible
        import math

        ax.set_yscale("log")  # a labelled decade at or below the typical iteration
        lo, typical = min(ys) / 1.5, sorted(ys)[len(ys) // 2]
        if 10 ** math.floor(math.log10(typical)) < lo:
            lo = 10 ** math.floor(math.log10(min(ys)))
        ax.set_ylim(lo, max(ys) * 1.6)
    else:
        ax.set_ylim(0, max(ys or [1.0]) * 1.15)
    top = blended_transform_factory(ax.transData, ax.transAxes)
    handles = []
    for w in fig["windows"]:
        c = FAULT_COLOURS[(w["number"] - 1) % len(FAULT_COLOURS)]
        if w["confirmed"]:
            ax.axvspan(w["from_s"], w["to_s"], color=c, alpha=0.22, lw=0)
        else:
            ax.axvspan(w["from_s"], w["to_s"], fill=False, hatch="//", edgecolor=c, lw=0)
        if w["shifted"]:  # planned edges where the application came later
            for v in (w["planned_from_s"], w["planned_to_s"]):
                ax.axvline(v, color=c, ls="--", lw=0.9)
        ax.text(
            (w["from_s"] + w["to_s"]) / 2, 1.005, str(w["number"]), transform=top, va="bottom",
            ha="center", fontsize=9, fontweight="bold", color=c,
        )  # fmt: skip
        handles.append(Patch(color=c, alpha=0.4, label=f"fault {w['number']}: {w['title']}"))
    ax.axvline(0.0, color="k", lw=0.7, ls=":", label="time origin: the first measured Go")
    ends = [x + y for s in fig["series"] for x, y in zip(s["x"], s["y"], strict=True)]
    lo = min([0.0, *(x for s in fig["series"] for x in s["x"])])
    hi = max([*ends, *(w["to_s"] for w in fig["windows"])], default=1.0)
    ax.set_xlim(lo - 0.01 * (hi - lo), hi + 0.01 * (hi - lo))
    _seconds_axis(ax.xaxis, fig["x"]["label"], max(abs(lo), abs(hi)))
    _seconds_axis(ax.yaxis, fig["y"]["label"], max(ys or [1.0]))
    ax.grid(True, which="major", alpha=0.3)
    points, labels = ax.get_legend_handles_labels()
    ax.legend(
        handles=[*points, *handles], labels=[*labels, *(h.get_label() for h in handles)],
        fontsize=8, loc="upper left", bbox_to_anchor=(0.0, -0.14), frameon=False,
    )  # fmt: skip


DRAW = {
    "size_sweep": _sweep,
    "backend_bars": _bars,
    "stacked_ranks": _stacked,
    "timeline": _timeline,
    "rank_timeline": _timeline,
    "model_error": _model_error,
    "grouped_bars": _grouped,
    "fault_timeline": _fault_timeline,
}
FORMATS = ("png", "svg", "pdf")


def draw(fig: dict[str, Any], path: Path, all_formats: bool = False) -> Any:
    """Draw one figure dict to ``path`` (PNG) and return the path; with ``all_formats`` also
    as SVG and PDF beside it, returning the three paths."""
    plt = _plt()
    fig["axes"] = []  # what each axis shows, recorded as drawn (``genie.report.checks``)
    with plt.rc_context(STYLE):
        if fig["kind"] == "small_multiples":
            f = _small_multiples(fig, plt)
        else:
            height = SIZE_IN[1]
            if fig["kind"] in ("timeline", "rank_timeline"):
                height = max(2.4, min(12.0, 1.4 + 0.4 * len(fig["series"])))
            f, ax = plt.subplots(figsize=(SIZE_IN[0], height), dpi=DPI)
            DRAW[fig["kind"]](ax, fig)
            pad = 16 if fig["kind"] == "fault_timeline" else 6
            ax.set_title(_wrap(fig["title"]), pad=pad)
            f.tight_layout()
            _record(fig, ax)
        paths = [path] + ([path.with_suffix(f".{x}") for x in FORMATS[1:]] if all_formats else [])
        try:
            for p in paths:
                f.savefig(p, format=p.suffix[1:], bbox_inches="tight")
        finally:
            plt.close(f)
    return paths if all_formats else path


def _wrap(title: str) -> str:
    """A title in lines that fit the figure's width."""
    import textwrap

    return "\n".join(textwrap.wrap(title, TITLE_CHARS)) or title


def _record(fig: dict[str, Any], ax, panel: int | None = None) -> None:
    """What ``ax`` shows, in the figure's data units (seconds, bytes/s): its limits, labels,
    scales and the unit of its ticks, appended to ``fig["axes"]`` (figures.json carries it)."""
    yscale = getattr(ax, "genie_yscale", 1.0)
    rec: dict[str, Any] = {
        "xlim": [float(v) for v in ax.get_xlim()],
        "ylim": [float(v) / yscale for v in ax.get_ylim()],
        "xlabel": ax.get_xlabel(),
        "ylabel": ax.get_ylabel(),
        "xscale": ax.get_xscale(),
        "yscale": ax.get_yscale(),
        "x_unit": getattr(ax.xaxis, "genie_unit", None),
        "y_unit": getattr(ax.yaxis, "genie_unit", None),
    }
    if panel is not None:
        rec["panel"] = panel
    fig.setdefault("axes", []).append(rec)


def require_matplotlib() -> None:
    """Raise MissingDependency with the install line when matplotlib is missing."""
    _plt()
