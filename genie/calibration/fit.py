"""Fitting a calibration to measured collective times: pure, numpy least squares.

The cost model's time ``T(p)`` of a program is positively homogeneous of degree one in the
parameter vector ``p`` (``genie.calibration.model.PARAMS``: step overhead, latency per hop and
inverse bandwidth fraction per link class (host NIC, uplink, intra-host), per-message cost):
scaling every one of them by ``c`` scales every event of the fluid simulation by ``c``. Along
one critical path ``T`` is therefore linear, ``T(p) = J(p) . p``, where ``J`` is the gradient:
how many overheads, hops and messages and how many seconds of nominal wire time lie on the path.
The fit alternates:

1. ``J`` of every fit point at the current ``p`` (finite differences of the real cost model;
   central ones for the bandwidths: where a host NIC and an uplink limit a flow alike, each
   takes half of its wire time, as Euler's relation ``T = J . p`` needs at such a kink);
2. ``p`` = the weighted linear least squares of ``J p = measured``, in relative error (rows
   divided by the measured time) and reweighted by 1/|relative residual| of the previous round
   (iteratively reweighted least squares towards the least mean absolute relative error, which
   is what MAPE measures, so one noisy size does not pull the fit the way squares would);

until ``p`` stops moving, keeping the best ``p`` seen by its real (not linearised) MAPE.
Parameters the data do not exercise keep their nominal value (a star has no uplinks: the
uplink class stays nominal); parameters the data cannot tell apart (the per-message cost when
every message crossed the same number of host NIC links, the per-step overhead when every
message came with the same steps) are folded into the latency per hop; an uplink parameter the
data cannot tell from the host NIC's (near-collinear columns: every message that crossed uplinks
also crossed host NICs in the same proportion, e.g. a non-blocking leaf-spine whose uplinks never
limit a flow) is held at its nominal value, the host NIC's carrying the path, and so is an
uplink parameter whose standard error exceeds its value (``weak_uplinks``); a time the fit puts
below zero is held at zero (a bandwidth it cannot place, at its nominal value); a per-message
cost within two standard errors of zero is left out. Each of these is said in the notes. The
uncertainties are the standard errors of the final weighted least squares (weighted residual
variance times the diagonal of ``(A^T W A)^-1``).

Physics bounds the parameters: every time (latency per hop, per-message cost, per-step
overhead) is at least zero, and a bandwidth fraction is at most 1 of the link's payload rate
(its line rate less the transport's headers: the wire cannot carry more payload). The first fit
leaves the bandwidth unbounded; where it wants more than the payload rate, the bound binds: the
fit runs again with the fraction held at 100 % and the per-message cost free (not dropped for
being small), so the time the line rate cannot explain goes to the per-message terms. The note
says what the fit wanted and where the time went, and ``Calibration.bounds`` lists each bound.

The points held back (``holdout``) are not fitted; the MAPE on them, before (nominal) and after
(calibrated), is the honest measure of the calibration. A calibration is ``offered``
(``--calibration latest`` may pick it) only when no bound binds and its held-back MAPE beats the
nominal one by a clear margin: at least ``MIN_GAIN_REL`` (10 %) of the nominal MAPE and
``MIN_GAIN_PP`` (0.5 percentage point); with nothing held back there is nothing to judge it on
and it is not offered. ``verdict`` says which.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genie.calibration.accuracy import MINOR_SHARE, split_by_share, weighted_error
from genie.calibration.model import (
    INTRA,
    NIC,
    PARAMS,
    UPLINK,
    Calibration,
    ClassParams,
    at_params,
    nominal_params,
    params_of,
)
from genie.errors import CalibrationError, GenieError

HOLDOUTS = ("alternate", "largest", "none")
MAX_ITER = 30
COLLINEAR = 1e-7  # smallest/largest singular value of the scaled design below this: dependent
IRLS_FLOOR = 1e-3  # relative residuals below 0.1 % all weigh alike
# a calibration is offered only if its held-back MAPE is at most (1 - MIN_GAIN_REL) x nominal and
# at least MIN_GAIN_PP percentage points below it
MIN_GAIN_REL = 0.10
MIN_GAIN_PP = 0.5
BANDWIDTHS = ("nic.inv_fraction", "uplink.inv_fraction", "intra.inv_fraction")
# the parameter left out first when the data cannot tell parameters apart
# (the uplink's before the step overhead: an uplink held at its nominal value is a smaller
# change to the model than software overheads folded into every hop)
DROP_ORDER = (
    "nic.message_s",
    "uplink.latency_s",
    "uplink.inv_fraction",
    "step_overhead_s",
    "intra.latency_s",
    "intra.inv_fraction",
    "nic.latency_s",
    "nic.inv_fraction",
)
FOLD = {"nic.message_s", "step_overhead_s"}  # dropped: zero, absorbed by the latency per hop
UPLINKS = ("uplink.latency_s", "uplink.inv_fraction")
WHAT = {
    "step_overhead_s": "per-step overhead",
    "nic.latency_s": f"{NIC} latency per hop",
    "nic.message_s": "per-message cost",
    "nic.inv_fraction": f"{NIC} bandwidth fraction",
    "uplink.latency_s": f"{UPLINK} latency per hop",
    "uplink.inv_fraction": f"{UPLINK} bandwidth fraction",
    "intra.latency_s": f"{INTRA} latency",
    "intra.inv_fraction": f"{INTRA} bandwidth fraction",
}


@dataclass
class Point:
    """One measured collective: its program, where its ranks ran, and its median time."""

    program: Any  # genie.collectives.program.Program
    hosts: list[Any]  # host (name or index) of each group rank, for the cost model
    topology: Any  # the nominal Topology of the testbed it ran on
    measured_s: float
    series: tuple  # points of one series differ only in size (for the hold-out)
    size: int
    label: str = ""
    held: bool = False
    nominal_s: float | None = None
    calibrated_s: float | None = None


@dataclass
class FitResult:
    """The fitted calibration with the points it was judged on."""

    calibration: Calibration
    points: list[Point] = field(default_factory=list)


def assign_holdout(points: Sequence[Point], mode: str) -> str:
    """Mark the held-back points of each series (sorted by size); return the rule in words.

    ``alternate``: every other size, from the second smallest; ``largest``: the largest quarter
    of the sizes (at least one); ``none``: nothing held back (the error is then on fit points).
    """
    if mode not in HOLDOUTS:
        raise CalibrationError(f"unknown hold-out {mode!r}; one of {', '.join(HOLDOUTS)}")
    by: dict[tuple, list[Point]] = {}
    for p in points:
        p.held = False
        by.setdefault(p.series, []).append(p)
    for series in by.values():
        series.sort(key=lambda p: p.size)
        if len(series) < 2 or mode == "none":
            continue
        if mode == "alternate":
            for p in series[1::2]:
                p.held = True
        else:
            for p in series[-max(1, len(series) // 4) :]:
                p.held = True
    return {
        "alternate": "every other size of each series (2nd, 4th, ... smallest) held back",
        "largest": "the largest quarter of the sizes of each series held back",
        "none": "nothing held back: errors are on the fit points themselves",
    }[mode]


class _Model:
    """The cost model at a parameter vector, with a cache (the fit asks many times)."""

    def __init__(self, points: Sequence[Point]) -> None:
        from genie.collectives.cost import estimate

        self._estimate = estimate
        self.points = list(points)
        self._topos: dict[tuple, Any] = {}
        self._times: dict[tuple, float] = {}

    def time(self, i: int, p: dict[str, float]) -> float:
        key = (i, *(p[k] for k in PARAMS))
        t = self._times.get(key)
        if t is None:
            pt = self.points[i]
            tkey = (id(pt.topology), *key[1:])
            topo = self._topos.get(tkey)
            if topo is None:
                topo = self._topos[tkey] = at_params(pt.topology, p)
            t = self._times[key] = float(self._estimate(pt.program, topo, pt.hosts).time_s)
        return t

    def times(self, idx: Sequence[int], p: dict[str, float]) -> np.ndarray:
        return np.array([self.time(i, p) for i in idx])

    def jacobian(self, idx: Sequence[int], p: dict[str, float]) -> np.ndarray:
        """d time / d parameter at ``p`` for the points ``idx`` (forward differences; central
        ones for the bandwidths, whose classes can limit a flow alike: see the module doc)."""
        base = self.times(idx, p)
        cols = []
        for k in PARAMS:
            h = 1e-4 * (abs(p[k]) + (1.0 if k.endswith("inv_fraction") else 1e-6))
            up = self.times(idx, {**p, k: p[k] + h})
            if k in BANDWIDTHS:
                cols.append((up - self.times(idx, {**p, k: p[k] - h})) / (2 * h))
            else:
                cols.append((up - base) / h)
        return np.stack(cols, axis=1)


def _mape(model: np.ndarray, measured: np.ndarray) -> float | None:
    if not len(measured):
        return None
    return float(np.mean(np.abs(model - measured) / measured) * 100.0)


def _rank(a: np.ndarray, cols: list[int]) -> int:
    """Numerical rank of the columns ``cols`` of ``a``, each scaled to unit length."""
    if not cols:
        return 0
    sub = a[:, cols]
    norms = np.linalg.norm(sub, axis=0)
    sub = sub[:, norms > 0] / norms[norms > 0]
    if not sub.shape[1]:
        return 0
    s = np.linalg.svd(sub, compute_uv=False)
    return int(np.sum(s > COLLINEAR * s[0]))


def _solve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    x, *_ = np.linalg.lstsq(a, b, rcond=None)
    return x


def fit(
    points: Sequence[Point],
    *,
    testbed_name: str = "",
    runs: Sequence[str] = (),
    holdout: str = "",
    on_iteration: Callable[[int], None] | None = None,
) -> FitResult:
    """Fit a calibration to the points not held back (see the module docstring)."""
    pts = list(points)
    fit_idx = [i for i, p in enumerate(pts) if not p.held]
    held_idx = [i for i, p in enumerate(pts) if p.held]
    if len(fit_idx) < 2:
        raise CalibrationError(
            f"{len(fit_idx)} fit point(s): a calibration needs measured times at 2 or more sizes "
            "(bench a sweep, e.g. --sizes 1KiB:16MiB:x4)"
        )
    model = _Model(pts)
    meas = np.array([p.measured_s for p in pts])
    t_fit = meas[fit_idx]
    start = nominal_params(pts[0].topology)
    start["step_overhead_s"] = 0.0
    start["nic.message_s"] = 0.0
    notes: list[str] = []

    # which parameters these data exercise at all, and which they can tell apart
    j0 = model.jacobian(fit_idx, start) / t_fit[:, None]
    free = [k for n, k in enumerate(PARAMS) if np.any(np.abs(j0[:, n]) > 1e-12)]
    unused = [k for k in PARAMS if k not in free]
    if any(k.startswith("intra.") for k in unused):
        notes.append(
            "intra-host parameters: not exercised by these runs (no two ranks of a collective "
            "on one host); the intra-host path keeps its nominal values"
        )
    if all(k in unused for k in UPLINKS):
        notes.append(
            "uplink parameters: not exercised by these runs (no message crossed a "
            "switch-to-switch link, e.g. on a star); uplinks keep their nominal values"
        )
    for k in unused:
        if k.startswith("nic.") or (k in UPLINKS and not all(x in unused for x in UPLINKS)):
            why = " (no uplink limited a flow's rate)" if k == "uplink.inv_fraction" else ""
            notes.append(f"{WHAT[k]}: not exercised by these runs{why}; kept at its nominal value")
    for k in [k for k in DROP_ORDER if k in free]:  # drop what the others already explain
        cols = [PARAMS.index(x) for x in free]
        if _rank(j0, cols) == len(cols):
            break
        rest = [PARAMS.index(x) for x in free if x != k]
        if _rank(j0, rest) == _rank(j0, cols):
            free.remove(k)
            notes.append(_inseparable(k))
    if not any(k in free for k in BANDWIDTHS):
        raise CalibrationError("these runs do not exercise any link's bandwidth")

    separable = list(free)
    zeroed = set(FOLD)
    said: list[str] = []
    p, cov = _iterate(model, fit_idx, t_fit, start, free, zeroed, said, on_iteration)
    wanted = {k: 1.0 / p[k] for k in BANDWIDTHS if k in free and p[k] < 1.0}
    bounds: list[str] = []
    if wanted:  # above the payload rate: hold it there, and let per-message costs take the rest
        free, zeroed, said = list(separable), set(FOLD), []
        p, cov = _iterate(
            model, fit_idx, t_fit, start, free, zeroed, said, on_iteration, bounded=True
        )
    else:
        # a per-message cost only where the data say so
        k = "nic.message_s"
        if k in free:
            n = free.index(k)
            err = math.sqrt(max(0.0, cov[n, n]))
            if not p[k] > 2 * err:
                free.remove(k)
                drop = (
                    f"per-message cost {p[k] * 1e6:.3g} ± {err * 1e6:.2g} us is within two "
                    "standard errors of zero: left out (part of the latency per hop)"
                )
                said = [drop]
                p, cov = _iterate(model, fit_idx, t_fit, start, free, zeroed, said, on_iteration)
    weak: set[str] = set()
    while k := weak_uplinks(p, _errors(free, cov), free):  # hold what the data cannot place
        said.append(_weak_note(k, p, _errors(free, cov)[k]))
        free.remove(k)
        weak.add(k)
        p, cov = _iterate(
            model, fit_idx, t_fit, start, free, zeroed, said, on_iteration, bounded=bool(wanted)
        )
    if wanted:
        bounds = _bound_notes({k: f for k, f in wanted.items() if k not in weak}, p, free)
        said += [
            f"{WHAT[k]}: the first fit wanted {f:.1%} of the payload rate; with per-message "
            f"costs free it fits {1.0 / p[k]:.1%}"
            for k, f in wanted.items()
            if k in free
        ]
    notes += said

    errs = _errors(free, cov)
    cal = _calibration(
        p, errs, {*free, *zeroed}, {k for k in wanted if k not in free and k not in weak}
    )
    cal.bounds = bounds
    cal.testbed_name = testbed_name
    cal.runs = list(runs)
    cal.holdout = holdout
    cal.notes = notes
    nominal = np.array([model.time(i, nominal_params(pts[i].topology)) for i in range(len(pts))])
    calibrated = model.times(range(len(pts)), p)
    for i, pt in enumerate(pts):
        pt.nominal_s, pt.calibrated_s = float(nominal[i]), float(calibrated[i])
    cal.points_fit, cal.points_held = len(fit_idx), len(held_idx)
    cal.mape = {
        "fit_nominal": _mape(nominal[fit_idx], meas[fit_idx]),
        "fit_calibrated": _mape(calibrated[fit_idx], meas[fit_idx]),
        "held_nominal": _mape(nominal[held_idx], meas[held_idx]),
        "held_calibrated": _mape(calibrated[held_idx], meas[held_idx]),
    }
    cal.rows = [
        {
            "label": pt.label,
            "size": pt.size,
            "held": pt.held,
            "measured_s": pt.measured_s,
            "nominal_s": pt.nominal_s,
            "calibrated_s": pt.calibrated_s,
        }
        for pt in pts
    ]
    _time_weighted(cal, meas, nominal, calibrated, fit_idx, held_idx)
    cal.offered, cal.verdict = judge(cal)
    return FitResult(cal, pts)


def _time_weighted(cal: Calibration, meas, nominal, calibrated, fit_idx, held_idx) -> None:
    """The time-weighted errors beside the MAPE, and the points below ``MINOR_SHARE`` of the
    measured time set apart (``genie.calibration.accuracy``)."""

    def w(model, idx) -> float | None:
        return weighted_error((float(model[i]), float(meas[i])) for i in idx)

    cal.weighted = {
        "fit_nominal": w(nominal, fit_idx),
        "fit_calibrated": w(calibrated, fit_idx),
        "held_nominal": w(nominal, held_idx),
        "held_calibrated": w(calibrated, held_idx),
    }
    major, minor = split_by_share([float(t) for t in meas])

    def m(model, idx) -> float | None:
        return _mape(model[idx], meas[idx]) if idx else None

    cal.apart = {
        "share": MINOR_SHARE,
        "points_below": len(minor),
        "below": {"nominal": m(nominal, minor), "calibrated": m(calibrated, minor)},
        "rest": {"nominal": m(nominal, major), "calibrated": m(calibrated, major)},
    }


def judge(cal: Calibration) -> tuple[bool, str]:
    """Whether ``cal`` is offered for use, and why (the rule is in the module docstring)."""
    if cal.bounds:
        return False, (
            "not offered: a physical bound binds ("
            + "; ".join(b.split(":")[0] for b in cal.bounds)
            + "): the wire carried payload faster than the testbed declares its links (an "
            "unshaped or loopback link is not limited by its declared rate); declare the rate "
            "it has"
        )
    nom, got = cal.mape.get("held_nominal"), cal.mape.get("held_calibrated")
    if nom is None or got is None:
        return False, "not offered: nothing held back to judge it on (--holdout none)"
    gain = nom - got
    if gain >= MIN_GAIN_PP and gain >= MIN_GAIN_REL * nom:
        return True, f"offered: held-back MAPE {got:.1f} % vs nominal {nom:.1f} %"
    return False, (
        f"not offered: held-back MAPE {got:.1f} % vs nominal {nom:.1f} %, not better by "
        f"{MIN_GAIN_REL:.0%} and {MIN_GAIN_PP} percentage point"
    )


def weak_uplinks(p: dict[str, float], errs: dict[str, float | None], free: list[str]) -> str:
    """The first fitted uplink parameter whose standard error exceeds its value ("" if none):
    the data barely tell it from the host NIC's (it is then held at its nominal value)."""
    for k in UPLINKS:
        err = errs.get(k)
        if k in free and err is not None and err > abs(p[k]):
            return k
    return ""


def _weak_note(k: str, p: dict[str, float], err: float | None) -> str:
    """Why an uplink parameter the fit could not place is held at its nominal value."""
    e = err or 0.0
    got = (
        f"{1.0 / p[k]:.1%} ± {e / (p[k] * p[k]):.1%} of the payload rate"
        if k.endswith("inv_fraction")
        else f"{p[k] * 1e6:.3g} ± {e * 1e6:.2g} us"
    )
    return (
        f"{WHAT[k]}: the fit gives {got}, a standard error larger than the value (these runs "
        f"barely tell the uplinks from the host NICs); kept at its nominal value, the {NIC} "
        "parameters carry the path"
    )


def _bound_notes(wanted: dict[str, float], p: dict[str, float], free: list[str]) -> list[str]:
    """One phrase per bandwidth the bounded refit holds at the payload rate."""
    out = []
    for k, frac in wanted.items():
        where = k.split(".")[0]
        if k in free:  # the refit, with per-message costs free, stays below the payload rate
            continue
        per = [f"{p[f'{where}.latency_s'] * 1e6:.3g} us per hop"]
        if where != "intra":
            per.append(f"{p['nic.message_s'] * 1e6:.3g} us per message")
        per.append(f"{p['step_overhead_s'] * 1e6:.3g} us per step")
        left = any(p[x] > 0 for x in (f"{where}.latency_s", "nic.message_s", "step_overhead_s"))
        rest = (
            f"the time it could not explain is per message: {', '.join(per)}"
            if left
            else "at the payload rate the model is already slower than the wire: no time is "
            "left to put per message"
        )
        out.append(
            f"{WHAT[k]} held at 100 % of the payload rate: the fit wanted {frac:.1%}; {rest}"
        )
    return out


def price_points(cal: Calibration, points: Sequence[Point]) -> None:
    """Set each point's nominal and calibrated time (``cal`` on the point's own topology)."""
    model = _Model(points)
    for i, pt in enumerate(points):
        pt.nominal_s = model.time(i, nominal_params(pt.topology))
        pt.calibrated_s = model.time(i, params_of(cal, pt.topology))


def _inseparable(k: str) -> str:
    if k == "nic.message_s":
        return (
            "per-message cost: not separable from the latency per hop in these runs (every "
            f"message crossed the same number of {NIC} links); it is part of the {NIC} latency "
            "per hop"
        )
    if k == "uplink.latency_s":
        return (
            f"{WHAT[k]}: not separable from the {NIC}'s in these runs (every message that "
            f"crossed uplinks crossed them in the same proportion to its {NIC} hops); kept at "
            f"its nominal value, the {NIC} latency per hop carries the path"
        )
    if k == "uplink.inv_fraction":
        return (
            f"{WHAT[k]}: not separable from the {NIC}'s in these runs (every flow an uplink "
            f"could limit was limited alike by a {NIC}); kept at its nominal value, the {NIC} "
            "fraction carries the path"
        )
    if k == "step_overhead_s":
        return (
            "per-step overhead: not separable from latency in these runs (every message came "
            "with the same steps); it is part of the latency per hop. Bench a collective with "
            "another step pattern (e.g. all_to_all beside all_reduce) to separate them"
        )
    return f"{WHAT[k]}: not separable from the other parameters in these runs; kept nominal"


def _iterate(model, fit_idx, t_fit, start, free, zeroed, notes, on_iteration, bounded=False):
    """Fixed-point least squares on the critical-path terms (module docstring); returns
    (parameters, covariance of the ``free`` ones). A parameter the best fit holds at zero leaves
    ``free`` and joins ``zeroed``; ``bounded``: a bandwidth fraction above 1 is held at 1."""
    p = dict(start)
    for k in PARAMS:
        if k not in free and k in zeroed:
            p[k] = 0.0
    best: tuple[float, dict[str, float], Any, list[str]] = (math.inf, p, None, free)
    weight = np.ones(len(t_fit))
    for it in range(MAX_ITER):
        if on_iteration:
            on_iteration(it)
        sw = np.sqrt(weight)[:, None]
        jac = model.jacobian(fit_idx, p) / t_fit[:, None]
        active = list(free)
        while True:  # a time fitted below zero is held at zero, a bandwidth at its nominal
            cols = [PARAMS.index(k) for k in active]
            held = [n for n in range(len(PARAMS)) if n not in cols]
            q = {**p, **{k: _floor(k, start) for k in free if k not in active}}
            b = 1.0 - jac[:, held] @ np.array([q[PARAMS[n]] for n in held])
            x = _solve(sw * jac[:, cols], sw[:, 0] * b) if cols else np.zeros(0)
            over = [
                (x[j], PARAMS[c])
                for j, c in enumerate(cols)
                if bounded and PARAMS[c] in BANDWIDTHS and x[j] < 1.0
            ]
            neg = [(x[j], PARAMS[c]) for j, c in enumerate(cols) if x[j] <= 0]
            if not over and not neg:
                break
            active.remove(min(over or neg)[1])  # the bandwidth bound first, then below zero
        if not bounded and not any(k.endswith("inv_fraction") for k in active):
            raise CalibrationError(
                "the fit gives no positive bandwidth: these sizes are all latency-bound; bench "
                "larger sizes too"
            )
        dof = len(t_fit) - len(cols)
        if dof < 1:
            raise CalibrationError(
                f"{len(t_fit)} fit points for {len(cols)} parameters: bench more sizes"
            )
        new = dict(q)
        for j, c in enumerate(cols):
            new[PARAMS[c]] = float(x[j])
        try:
            rel = model.times(fit_idx, new) / t_fit - 1.0
        except GenieError as exc:
            raise CalibrationError(f"the cost model cannot price a fitted point: {exc}") from None
        mape = float(np.mean(np.abs(rel)))
        a = sw * jac[:, cols]
        resid = a @ x - sw[:, 0] * b
        cov = float(np.sum(resid**2)) / dof * np.linalg.pinv(a.T @ a) if cols else np.zeros((0, 0))
        if mape < best[0]:
            best = (mape, new, cov, list(active))
        moved = max(abs(new[k] - p[k]) / (abs(p[k]) + 1e-12) for k in free)
        p = new
        weight = 1.0 / np.maximum(np.abs(rel), IRLS_FLOOR)
        weight /= weight.mean()
        if moved < 1e-9:
            break
    _, p, cov, active = best
    for k in [k for k in free if k not in active]:
        if k.endswith("inv_fraction"):
            if not bounded:
                notes.append(
                    f"{WHAT[k]}: these runs do not determine it; kept at its nominal value"
                )
        elif k in UPLINKS:
            notes.append(
                f"{WHAT[k]}: the fit puts it below zero (these runs cannot place it beside the "
                f"{NIC}'s); kept at its nominal value"
            )
        else:
            notes.append(f"{WHAT[k]}: the fit puts it below zero; held at 0")
            zeroed.add(k)
        free.remove(k)
    return p, cov


def _floor(k: str, start: dict[str, float]) -> float:
    """Where a parameter the fit cannot place is held: a time at zero, a bandwidth and an
    uplink's latency (the hop of a switch, not the software's) at its nominal value."""
    return start[k] if k.endswith("inv_fraction") or k in UPLINKS else 0.0


def _errors(free: list[str], cov) -> dict[str, float | None]:
    """1-sigma uncertainty of each fitted parameter (None: not fitted)."""
    out: dict[str, float | None] = {k: None for k in PARAMS}
    for n, k in enumerate(free):
        out[k] = math.sqrt(max(0.0, float(cov[n, n])))
    return out


def _calibration(p, errs, placed, held: set[str]) -> Calibration:
    """The Calibration of the parameters ``p`` (``placed``: fitted or held at zero; ``held``:
    bandwidths held at the bound). The host NIC class is always there; uplink and intra-host
    only where one of their parameters was placed or held at the bound: else they keep the
    nominal values of whatever topology the calibration prices."""

    def frac(k: str) -> tuple[float, float | None]:
        g = p[k]
        e = errs[k]
        return 1.0 / g, (None if e is None else e / (g * g))

    classes = {}
    for name, x in ((NIC, "nic"), (UPLINK, "uplink"), (INTRA, "intra")):
        mine = (f"{x}.latency_s", f"{x}.inv_fraction", f"{x}.message_s")
        if name != NIC and not any(k in placed or k in held for k in mine):
            continue
        f, fe = frac(f"{x}.inv_fraction")
        classes[name] = ClassParams(
            latency_s=p[f"{x}.latency_s"],
            latency_err_s=errs[f"{x}.latency_s"],
            bandwidth_fraction=f,
            bandwidth_fraction_err=fe,
            message_s=p.get(f"{x}.message_s", 0.0),
            message_err_s=errs.get(f"{x}.message_s"),
            at_bound=f"{x}.inv_fraction" in held,
        )
    return Calibration(
        step_overhead_s=p["step_overhead_s"],
        step_overhead_err_s=errs["step_overhead_s"],
        classes=classes,
    )
