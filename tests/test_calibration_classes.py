"""Calibration per link class: host NICs (a link with a host at one end) and uplinks (switch to
switch) are fitted apart where the runs tell them apart; a class the runs do not exercise keeps
its nominal values and the notes say so; an uplink the runs cannot tell from the host NICs (near-
collinear columns, or a standard error above its value) is held at its nominal value, not fitted
wild; calibrations stored with the one ``inter-host`` class of before still load and apply to
both classes. Measured points are the cost model's own times at known parameters, with noise."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from genie.calibration.fit import Point, assign_holdout, fit, price_points, weak_uplinks
from genie.calibration.model import (
    CLASSES,
    INTRA,
    LEGACY_INTER,
    NIC,
    UPLINK,
    Calibration,
    at_params,
    calibrate_topology,
    identity,
    link_class,
    nominal_params,
)
from genie.calibration.stored import resolve
from genie.collectives import build_program
from genie.collectives import topology as T
from genie.collectives.cost import estimate
from genie.collectives.topology import Link
from genie.store import RunStore

SIZES = [1 << k for k in range(12, 25, 2)]  # 4 KiB .. 16 MiB
COLLS = (("all_reduce", "ring"), ("all_to_all", "direct"))


def _points(topo, truth, runs, noise=0.003, seed=3) -> list[Point]:
    """The cost model at ``truth`` on ``topo``, per run (name, hosts, collectives), with noise."""
    rng = np.random.default_rng(seed)
    true_topo = at_params(topo, {**nominal_params(topo), **truth})
    pts = []
    for name, hosts, colls in runs:
        n = len(hosts)
        for c, a in colls:
            for s in SIZES:
                prog = build_program(c, a, n, s, size_convention="nccl")
                t = estimate(prog, true_topo, hosts).time_s * (1 + noise * rng.standard_normal())
                pts.append(Point(prog, hosts, topo, t, (name, c, a, n), s, f"{c} n={n}"))
    assign_holdout(pts, "alternate")
    return pts


def _within(got: float, want: float, rel: float = 0.02) -> bool:
    return abs(got - want) <= rel * abs(want)


def test_links_are_host_nics_or_uplinks():
    ls = T.leaf_spine(2, 2, 2, 1.25e9, 1e-6)
    got = {(lk.src, lk.dst): link_class(ls, lk) for lk in ls.links}
    assert got[("h0", "leaf0")] == got[("leaf1", "h3")] == NIC
    assert got[("leaf0", "spine1")] == got[("spine0", "leaf1")] == UPLINK
    ring = T.ring(4, 1e9, 1e-6)  # hosts wired to hosts: every link is a host's own
    assert {link_class(ring, lk) for lk in ring.links} == {NIC}


def test_a_fit_recovers_distinct_nic_and_uplink_fractions_where_each_binds_on_its_own_run():
    # 2 leaves of 4 hosts, one spine, uplinks 4:1 oversubscribed; the run on one leaf is held by
    # the host NICs (80 %), the all-to-all across the leaves by the uplinks (60 %)
    ls = T.leaf_spine(2, 1, 4, 1.25e9, 1e-6, 4.0)
    truth = {
        "step_overhead_s": 30e-6,
        "nic.latency_s": 10e-6,
        "nic.inv_fraction": 1 / 0.8,
        "uplink.latency_s": 3e-6,
        "uplink.inv_fraction": 1 / 0.6,
    }
    h = list(ls.hosts)
    runs = [("leaf", h[:4], COLLS), ("cross", [h[0], h[1], h[4], h[5]], COLLS[1:])]
    cal = fit(_points(ls, truth, runs)).calibration
    nic, up = cal.classes[NIC], cal.classes[UPLINK]
    assert _within(nic.bandwidth_fraction, 0.8) and _within(up.bandwidth_fraction, 0.6)
    assert abs(nic.bandwidth_fraction - 0.8) < 4 * (nic.bandwidth_fraction_err or 0)
    assert abs(up.bandwidth_fraction - 0.6) < 4 * (up.bandwidth_fraction_err or 0)
    assert _within(cal.step_overhead_s, 30e-6) and _within(nic.latency_s, 10e-6, 0.05)
    assert abs(up.latency_s - 3e-6) < 3 * (up.latency_err_s or 0)
    assert not nic.at_bound and not up.at_bound and cal.bounds == []
    assert cal.offered, cal.verdict
    text = cal.describe()
    assert "host NIC: 80." in text and "uplink: 60." in text and "intra-host: nominal" in text
    # uplinks as fast as the NICs: the uplink class follows its own truth, not the NICs'
    other = fit(_points(ls, {**truth, "uplink.inv_fraction": 1 / 0.9}, runs)).calibration
    assert _within(other.classes[UPLINK].bandwidth_fraction, 0.9)
    assert _within(other.classes[NIC].bandwidth_fraction, 0.8)


def test_a_star_fit_leaves_the_uplinks_nominal_and_says_so():
    star = T.switch(4, 1.25e9, 1e-6)
    truth = {"step_overhead_s": 30e-6, "nic.latency_s": 10e-6, "nic.inv_fraction": 1 / 0.7}
    cal = fit(_points(star, truth, [("star", list(star.hosts), COLLS)])).calibration
    assert list(cal.classes) == [NIC] and _within(cal.classes[NIC].bandwidth_fraction, 0.7)
    assert any(
        n.startswith("uplink parameters: not exercised by these runs") and "star" in n
        for n in cal.notes
    )
    assert "uplink: nominal (not fitted)" in cal.describe()
    # applied to a leaf-spine (what --validate does): its uplinks keep their declared rates
    ls = T.leaf_spine(2, 2, 2, 1.25e9, 2e-6)
    priced = calibrate_topology(ls, cal)
    for nominal, got in zip(ls.links, priced.links, strict=True):
        if link_class(ls, nominal) == UPLINK:
            assert (got.bandwidth, got.latency) == (nominal.bandwidth, nominal.latency)
        else:
            assert got.bandwidth == pytest.approx(nominal.bandwidth * 0.7, rel=0.02)
            assert got.latency == cal.classes[NIC].latency_s


def test_a_star_fit_validated_on_an_oversubscribed_leaf_spine_leaves_its_uplinks_alone():
    # the hosts' software and NICs (90 %) measured on a star; a 2-leaf 3:1 fabric of the same
    # hosts whose uplinks carry their declared payload rate (what --validate judges it on)
    star = T.switch(4, 1.25e9, 1e-6)
    truth = {"step_overhead_s": 30e-6, "nic.latency_s": 10e-6, "nic.inv_fraction": 1 / 0.9}
    cal = fit(_points(star, truth, [("star", list(star.hosts), COLLS)])).calibration
    ls = T.leaf_spine(2, 1, 3, 1.25e9, 1e-6, 3.0)
    val = _points(ls, truth, [("ls", list(ls.hosts), COLLS)])

    def mape(c: Calibration) -> tuple[float, float]:
        price_points(c, val)

        def err(attr: str) -> float:
            return 100 * float(np.mean([abs(getattr(p, attr) / p.measured_s - 1) for p in val]))

        return err("nominal_s"), err("calibrated_s")

    nominal, calibrated = mape(cal)
    assert calibrated < 1.0 < 40.0 < nominal
    # the one inter-host class of before put the NICs' 90 % on the uplinks too: 6 % off
    old = Calibration(step_overhead_s=cal.step_overhead_s, classes={LEGACY_INTER: cal.classes[NIC]})
    assert mape(old)[1] > 4.0


def test_uplinks_a_non_blocking_leaf_spine_cannot_tell_apart_are_held_nominal_not_fitted_wild():
    # 2 spines for 4 hosts per leaf: uplinks at twice the host rate never limit a flow, and
    # every message on a critical path crosses the leaves (as many uplinks as host NICs)
    ls = T.leaf_spine(2, 2, 4, 1.25e9, 1e-6)
    truth = {"step_overhead_s": 30e-6, "nic.latency_s": 10e-6, "nic.inv_fraction": 1 / 0.8}
    cal = fit(_points(ls, truth, [("all", list(ls.hosts), COLLS)])).calibration
    notes = " | ".join(cal.notes)
    assert "uplink bandwidth fraction: not exercised by these runs (no uplink limited" in notes
    assert "uplink latency per hop: not separable from the host NIC's in these runs" in notes
    assert UPLINK not in cal.classes and "uplink: nominal (not fitted)" in cal.describe()
    # what the uplinks cannot take stays where it is: the step overhead and the NICs' values
    assert _within(cal.step_overhead_s, 30e-6) and _within(cal.classes[NIC].latency_s, 10e-6)
    assert _within(cal.classes[NIC].bandwidth_fraction, 0.8)
    assert (cal.mape["held_calibrated"] or 100.0) < 1.0 and cal.offered


def test_an_uplink_latency_with_a_standard_error_above_its_value_is_held_nominal():
    # uplinks at the hosts' rate (they limit cross-leaf flows at 60 %), and a 0.2 us uplink hop
    # that 1 % noise on 10 us host NIC hops cannot place
    ls = T.leaf_spine(2, 2, 2, 1.25e9, 1e-6)
    truth = {
        "step_overhead_s": 30e-6,
        "nic.latency_s": 10e-6,
        "nic.inv_fraction": 1 / 0.8,
        "uplink.latency_s": 0.2e-6,
        "uplink.inv_fraction": 1 / 0.6,
    }
    h = list(ls.hosts)
    runs = [("all", h, COLLS), ("leaf", h[:2], COLLS)]
    cal = fit(_points(ls, truth, runs, noise=0.01, seed=0)).calibration
    up = cal.classes[UPLINK]
    (note,) = [n for n in cal.notes if n.startswith("uplink latency per hop")]
    assert "a standard error larger than the value" in note and "kept at its nominal" in note
    assert up.latency_s == 1e-6 and up.latency_err_s is None  # the declared hop
    assert _within(up.bandwidth_fraction, 0.6) and up.bandwidth_fraction_err is not None
    assert _within(cal.classes[NIC].bandwidth_fraction, 0.8)
    assert "1 us (not fitted) per hop" in cal.describe()


def test_weak_uplinks_names_the_first_uplink_parameter_its_error_swamps():
    p = {"uplink.latency_s": 1e-6, "uplink.inv_fraction": 1.5, "nic.latency_s": 1e-6}
    free = ["nic.latency_s", "uplink.latency_s", "uplink.inv_fraction"]
    errs: dict[str, float | None] = {
        "nic.latency_s": 5e-6,  # host NICs are never held by this rule
        "uplink.latency_s": 0.5e-6,
        "uplink.inv_fraction": 2.0,
    }
    assert weak_uplinks(p, errs, free) == "uplink.inv_fraction"
    assert weak_uplinks(p, {**errs, "uplink.latency_s": 2e-6}, free) == "uplink.latency_s"
    assert weak_uplinks(p, {**errs, "uplink.inv_fraction": 0.1}, free) == ""
    assert weak_uplinks(p, errs, free[:2]) == ""  # not fitted: nothing to hold


def _legacy_doc(topo, **fields) -> dict:
    """A calibration as ``genie calibrate`` stored it before the link classes were split."""
    return {
        "testbed_name": "tb",
        "step_overhead_s": 10e-6,
        "step_overhead_err_s": 1e-7,
        "classes": {
            LEGACY_INTER: {
                "latency_s": 5e-6,
                "bandwidth_fraction": 0.8,
                "message_s": 2e-6,
                "latency_err_s": 1e-7,
                "bandwidth_fraction_err": 0.01,
                "message_err_s": 1e-7,
                "at_bound": False,
            },
            INTRA: {"latency_s": 3e-6, "bandwidth_fraction": 0.5},
        },
        "notes": ["old note"],
        "offered": True,
        "verdict": "offered: held-back MAPE 1.0 % vs nominal 50.0 %",
        "identity": identity(topo),
        **fields,
    }


def test_a_calibration_stored_with_one_inter_host_class_still_loads_and_applies_to_both(tmp_path):
    ls = T.leaf_spine(2, 2, 2, 1.25e9, 1e-6, intra_bandwidth=10e9)
    path = tmp_path / "runs.sqlite"
    with RunStore(path) as st:
        cal_id = st.add_calibration(_legacy_doc(ls), testbed_name="tb", testbed_text="", runs=[])
    for cal in (resolve(cal_id, path, "tb", ls), resolve("latest", path, "tb", ls)):
        assert cal is not None and cal.cal_id == cal_id
        assert list(cal.classes) == list(CLASSES)
        nic, up = cal.classes[NIC], cal.classes[UPLINK]
        assert (nic.latency_s, nic.bandwidth_fraction, nic.message_s) == (5e-6, 0.8, 2e-6)
        assert (up.latency_s, up.bandwidth_fraction, up.message_s) == (5e-6, 0.8, 0.0)
        assert cal.notes[0] == "old note" and "inter-host class" in cal.notes[1]
        assert "host NIC: 80.0% ± 1.0%" in cal.describe() and "uplink: 80.0%" in cal.describe()
        # it prices as it did: every link at 80 % with 5 us, 2 us per message
        old = ls.derive(
            link=lambda lk: Link(lk.src, lk.dst, lk.bandwidth * 0.8, 5e-6),
            intra_bandwidth=10e9 * 0.5,
            intra_latency=3e-6,
            message_latency=2e-6,
            step_overhead=10e-6,
        )
        priced = calibrate_topology(ls, cal)
        for c, a in COLLS:
            prog = build_program(c, a, 8, 1 << 20, size_convention="nccl", ranks_per_host=2)
            hosts = [ls.hosts[r // 2] for r in range(8)]
            want = estimate(prog, old, hosts).time_s
            assert estimate(prog, priced, hosts).time_s == pytest.approx(want, rel=1e-12)
    # written back, it has the new classes only (and loads again unchanged)
    assert cal is not None
    doc = msgspec.to_builtins(cal)
    assert LEGACY_INTER not in doc["classes"]
    assert msgspec.convert(doc, Calibration).classes == cal.classes
