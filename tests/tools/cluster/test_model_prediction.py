"""The model (``mailrail simulate``) against a fresh run on a virtual cluster: every mode predicted, its victim
memory within the validated error."""

from __future__ import annotations

import json
import math

import pytest

from helpers import mailrail
from mailrail_simulate.calibrate import predict, relative_error
from mailrail_simulate.params import CALIBRATED, DATA_DIR, load_params
from mailrail_simulate.runs import read_runs

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.mpi]


def test_the_model_predicts_a_small_cluster_run_and_its_victim_memory_within_its_validated_error(
    tmp_path, as_root, leaves_nothing
):
    """A run the model never saw (2 nodes of 4 ranks, fewer messages than its fit and held-out runs): each credit
    mode predicted from the run's own record; its victim memory within the largest error of the validation shipped
    with the package (docs: "The model at scale").  Goodput is predicted, not held to that bound here: a measured
    rate follows whatever else the machine runs, so its error is a measurement (``mailrail simulate validate``,
    on a quiet machine), not a test."""
    out = tmp_path / "run"
    completed = mailrail(
        "compare", "--cluster", "2", "-n", "8", "--messages", "3000", "--trials", "2", "--modes", "rank,node",
        "--victim-node-memory", "off", "--out", str(out),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    with open(f"{DATA_DIR}/validation.json") as source:
        bound = json.load(source)["max_abs_error"]
    params, _ = load_params(CALIBRATED)
    cases = read_runs([str(out)])
    assert [case.workload.mode for case in cases] == ["rank", "node"]
    for case in cases:
        prediction = predict(case, params)
        assert prediction.status == "ok"
        assert math.isfinite(prediction.goodput_bps) and prediction.goodput_bps > 0, prediction
        assert relative_error(prediction.goodput_bps, case.goodput_bps) is not None
        error = relative_error(prediction.victim_bytes, case.victim_peak_bytes)
        assert error is not None and abs(error) <= bound, (
            f"{case.name}: victim memory modelled {prediction.victim_bytes:.4g}, measured "
            f"{case.victim_peak_bytes:.4g} ({error:+.0%}; validated max |error| {bound:.0%})"
        )
