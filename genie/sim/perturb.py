"""Stragglers and jitter: per-rank compute slow-downs and random noise on compute durations.

A ``Perturbation`` scales the duration of every COMPUTE node (GPU kernels and host work alike:
a slow GPU or a busy host) of a compiled workload, purely, before it is replayed or turned into
op lists (so ``genie simulate`` and ``genie emulate`` see the same perturbed workload):

* ``slowdown``: rank -> factor (1.5 = that rank computes 50 % slower);
* ``jitter``: each compute node's duration times a random factor of mean 1:
  ``normal:S`` (1 + S z, clipped at 0), ``lognormal:S`` (exp(S z - S^2 / 2)) or ``uniform:S``
  (1 + U(-sqrt(3) S, sqrt(3) S)); z standard normal, so S is about the standard deviation.
  Drawn from a generator seeded by (seed, rank), so a rank's noise does not depend on how many
  ranks or jobs there are, and the same seed gives the same workload.

The file form (``--perturb FILE``, TOML)::

    seed = 7
    jitter = "lognormal:0.05"
    [slowdown]
    3 = 1.5          # rank 3 computes 1.5x slower
    "8-11" = 1.2     # a range of ranks
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from genie.errors import UsageError
from genie.sim.compiled import CompiledWorkload, Kind

DISTRIBUTIONS = ("normal", "lognormal", "uniform")
MAX_FACTOR = 1000.0


@dataclass(frozen=True)
class Perturbation:
    """Per-rank compute slow-downs and jitter (see the module docstring)."""

    slowdown: dict[int, float] = field(default_factory=dict)
    jitter: str = ""  # "" or one of DISTRIBUTIONS
    sigma: float = 0.0
    seed: int = 0

    def __bool__(self) -> bool:
        return bool(self.slowdown) or (bool(self.jitter) and self.sigma > 0)

    def describe(self) -> str:
        """One line: which ranks are slow and what noise is drawn."""
        parts = []
        if self.slowdown:
            slow = ", ".join(f"rank {r} x{f:g}" for r, f in sorted(self.slowdown.items())[:8])
            more = len(self.slowdown) - 8
            parts.append(f"compute slowed: {slow}" + (f" (+{more} ranks)" if more > 0 else ""))
        if self.jitter and self.sigma > 0:
            parts.append(f"jitter {self.jitter}:{self.sigma:g} per compute node, seed {self.seed}")
        return "; ".join(parts) or "none"

    def to_dict(self) -> dict:
        """JSON form."""
        return {
            "slowdown": {str(r): f for r, f in sorted(self.slowdown.items())},
            "jitter": self.jitter or None,
            "sigma": self.sigma,
            "seed": self.seed,
        }


def _ranks(text: str) -> range:
    lo, _, hi = str(text).strip().partition("-")
    try:
        a, b = int(lo), int(hi) if hi else int(lo)
    except ValueError:
        raise UsageError(f"straggler ranks {text!r}: use a rank (3) or a range (8-11)") from None
    if a < 0 or b < a:
        raise UsageError(f"straggler ranks {text!r}: not a range of ranks")
    return range(a, b + 1)


def _factor(value, what: str) -> float:
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{what}: factor {value!r} is not a number") from None
    if not (math.isfinite(f) and 0 < f <= MAX_FACTOR):
        raise UsageError(f"{what}: factor {value!r} must be in (0, {MAX_FACTOR:g}]")
    return f


def parse_stragglers(items: Iterable[str]) -> dict[int, float]:
    """``RANK=FACTOR`` or ``A-B=FACTOR`` items (``3=1.5``) -> rank -> factor."""
    out: dict[int, float] = {}
    for item in items:
        ranks, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--straggler {item!r}: use RANK=FACTOR, e.g. 3=1.5 or 8-11=1.2")
        f = _factor(value, f"--straggler {item!r}")
        for r in _ranks(ranks):
            out[r] = f
    return out


def parse_jitter(text: str | None) -> tuple[str, float]:
    """``normal:0.05`` (or ``lognormal:5%``, ``uniform:0.1``) -> (distribution, sigma)."""
    if not text or text == "none":
        return "", 0.0
    dist, sep, value = text.partition(":")
    if dist not in DISTRIBUTIONS or not sep:
        raise UsageError(
            f"--jitter {text!r}: use DIST:SIGMA with DIST one of {', '.join(DISTRIBUTIONS)} "
            "(e.g. lognormal:0.05 or normal:5%)"
        )
    v = value.strip()
    try:
        sigma = float(v[:-1]) / 100 if v.endswith("%") else float(v)
    except ValueError:
        raise UsageError(f"--jitter {text!r}: {value!r} is not a number") from None
    if not (math.isfinite(sigma) and 0 <= sigma <= 10):
        raise UsageError(f"--jitter {text!r}: sigma must be in [0, 10]")
    return dist, sigma


def load_file(path: str | Path) -> Perturbation:
    """A perturbation from a TOML file (see the module docstring)."""
    p = Path(path)
    try:
        doc = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise UsageError(f"--perturb: no file {p}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"--perturb {p}: not TOML ({exc})") from None
    unknown = set(doc) - {"seed", "jitter", "slowdown"}
    if unknown:
        raise UsageError(f"--perturb {p}: unknown keys {sorted(unknown)} (seed, jitter, slowdown)")
    slow = doc.get("slowdown", {})
    if not isinstance(slow, dict):
        raise UsageError(f"--perturb {p}: [slowdown] must map ranks to factors")
    items = [f"{k}={v}" for k, v in slow.items()]
    dist, sigma = parse_jitter(doc.get("jitter"))
    seed = doc.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**63:
        raise UsageError(f"--perturb {p}: seed must be an integer >= 0")
    return Perturbation(parse_stragglers(items), dist, sigma, seed)


def combine(
    file: str | None, stragglers: Iterable[str] | None, jitter: str | None, seed: int | None
) -> Perturbation:
    """The file's perturbation (if any) with the command line's options over it."""
    base = load_file(file) if file else Perturbation()
    slow = {**base.slowdown, **parse_stragglers(stragglers or [])}
    dist, sigma = parse_jitter(jitter) if jitter else (base.jitter, base.sigma)
    return Perturbation(slow, dist, sigma, base.seed if seed is None else seed)


def _noise(dist: str, sigma: float, rng: np.random.Generator, n: int) -> np.ndarray:
    if dist == "normal":
        return np.maximum(0.0, 1.0 + sigma * rng.standard_normal(n))
    if dist == "lognormal":
        return np.exp(sigma * rng.standard_normal(n) - sigma * sigma / 2)
    half = sigma * math.sqrt(3.0)  # the standard deviation is sigma, as for the others
    return 1.0 + rng.uniform(-half, half, n)


def check_ranks(p: Perturbation, n_ranks: int) -> None:
    """Refuse straggler ranks the workload does not have."""
    bad = sorted(r for r in p.slowdown if r >= n_ranks)
    if bad:
        raise UsageError(f"straggler ranks {bad[:8]} outside the workload's ranks 0..{n_ranks - 1}")


def apply(cw: CompiledWorkload, p: Perturbation, rank_base: int | None = None) -> CompiledWorkload:
    """``cw`` with its compute durations scaled as ``p`` says (a new workload; ``cw`` kept).

    ``rank_base``: the global rank of ``cw``'s rank 0 (a job among several): ``p`` names and
    seeds global ranks, so a job perturbs alike alone and beside others (the caller checks the
    ranks against all jobs); without it, ``p``'s ranks must be ``cw``'s.
    """
    if not p:
        return cw
    if rank_base is None:
        check_ranks(p, cw.n_ranks)
        rank_base = 0
    ranks = []
    for local, cr in enumerate(cw.ranks):
        r = rank_base + local
        comp = cr.kind == Kind.COMPUTE
        dur = cr.duration.copy()
        f = p.slowdown.get(r, 1.0)
        if f != 1.0:
            dur[comp] *= f
        if p.jitter and p.sigma > 0 and comp.any():
            rng = np.random.default_rng([p.seed, r])
            dur[comp] *= _noise(p.jitter, p.sigma, rng, int(comp.sum()))
        ranks.append(dataclasses.replace(cr, duration=dur))
    return dataclasses.replace(cw, ranks=ranks)
