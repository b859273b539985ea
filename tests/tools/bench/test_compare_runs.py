"""``mailrail compare --runs``: which run is shown, and the spread over the runs (no MPI job)."""

from __future__ import annotations

import pytest

from mailrail_tools.bench import compare


def _document(**goodputs) -> dict:
    """A compare.json of one run whose modes reached *goodputs* (Mb/s; None: killed) in each of two trials."""
    modes = {}
    for mode, goodput in goodputs.items():
        if goodput is None:
            modes[mode] = {"status": "out_of_memory"}
        else:
            modes[mode] = {"status": "ok", "trials": [{"goodput_bps": goodput * 1e6}] * 2}
    return {"modes": modes}


def test_the_run_shown_is_the_one_closest_to_every_mode_s_median():
    documents = [
        _document(none=None, node=300, adaptive=900),  # adaptive far above its median
        _document(none=None, node=330, adaptive=500),  # the middle of both
        _document(none=None, node=100, adaptive=520),  # node far below
    ]
    assert compare.median_run(documents) == 1
    spread = compare.runs_summary(documents, 1)
    assert spread["modes"]["node"] | {"goodput_mbps": None} == {
        "goodput_mbps": None,
        "statuses": ["ok"] * 3,
        "finished": 3,
        "min": 100,
        "median": 300,
        "max": 330,
    }
    assert "median" not in spread["modes"]["none"] and spread["modes"]["none"]["statuses"] == ["out_of_memory"] * 3
    ratio = spread["goodput_ratios"]["adaptive/node"]
    assert ratio["per_run"] == [3.0, pytest.approx(500 / 330), 5.2] and ratio["min"] == pytest.approx(500 / 330)
    assert (
        "- over 3 runs, goodput median (min-max): none never finished (out of memory in 3), node 300 (100-330) Mb/s"
        in ("\n".join(compare.spread_lines(spread)))
    )


def test_the_run_shown_ends_every_mode_as_most_runs_did():
    """Unconstrained mode ran out of memory in 2 runs of 3: the run shown is one of those, even though the
    run where it finished is closest to the credit modes' medians."""
    documents = [
        _document(none=2700, node=330, adaptive=500),  # the closest goodputs, but none finished here only
        _document(none=None, node=300, adaptive=900),
        _document(none=None, node=100, adaptive=520),
    ]
    assert compare.median_run(documents) == 1  # of the two usual runs, the closer to the medians (300, 520)
    spread = compare.runs_summary(documents, 2)
    line = compare.spread_lines(spread)[0]
    assert "none 2,700 (2,700-2,700) Mb/s in the 1 of 3 runs it finished (out of memory in 2)" in line
