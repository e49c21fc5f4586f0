"""The columns decoder's attr sections: the derived index array a block reads stays equal to
the list it is grown from, across growth and ``bound_sections``'s reset."""

from __future__ import annotations

import numpy as np

from genie.workload.et_columns import Interner


def test_section_array_follows_its_list_through_growth_and_reset() -> None:
    sh = Interner()
    for step in range(300):  # past the first allocation (64) and several doublings
        sh.section_derived.extend(range(step * 3, step * 3 + (step % 5)))
        got = sh.section_derived_array()
        assert got.dtype == np.int64
        assert got.tolist() == sh.section_derived
        if step == 150:
            sh.bound_sections(limit=0)  # forgets every section: the array starts again
            assert sh.section_derived == [] and sh.section_derived_array().size == 0
