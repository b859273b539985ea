"""``mailrail simulate measure-idle`` end to end at a tiny size, under real mpiexec jobs over TCP and shared
memory: every point finishes, every message is checked, the JSON has its figures and fits.  Correctness only:
the figures themselves are the experiment's."""

from __future__ import annotations

import argparse
import json

import pytest

from helpers import mailrail
from mailrail_simulate.measure import idle
from mailrail_simulate.measure.idle import idle_fit, iterations_for, receive_fit, spin
from mailrail_tools.jobs import which_mpi as launchers

pytestmark = pytest.mark.mpi


def test_both_experiments_run_on_both_transports_and_report_their_figures(tmp_path):
    out = tmp_path / "idle.json"
    completed = mailrail(
        "simulate", "measure-idle", "--idle", "1,2", "--peers", "1,2", "--reps", "2", "--work-ms", "1",
        "--messages", "300", "--time-limit", "60", "--json", str(out),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["benchmark"] == "idle" and document["busy"] == 1 and document["cores"] >= 1
    assert set(document["transports"]) == {"tcp", "sm"}
    for entry in document["transports"].values():
        assert [p["idle"] for p in entry["idle"]] == [0, 1, 2]  # N = 0: the reference
        assert all(p["status"] == "ok" and p["work_ms"]["median"] > 0 for p in entry["idle"])
        assert entry["idle"][0]["stretch"] == 1.0
        for point in entry["idle"][1:]:
            assert point["idle_polls_per_s"] > 0 and 0 <= point["idle_cpu_share"] <= 1.5
            assert (point["idle_share_effective"] is None) or point["idle_share_effective"] >= 0
        assert [p["peers"] for p in entry["receive"]] == [1, 2]
        for point in entry["receive"]:
            assert point["status"] == "ok" and point["ranks"] == point["peers"] + 1
            assert point["wall_us_per_message"] > 0 and point["idle_empty_call_us"] > 0
        assert set(entry["receive_fit"]) >= {"cpu_us_per_message", "empty_call_us"}
    assert "effective idle share" in completed.stdout or "idle share" in completed.stdout
    assert "connected peers" in completed.stdout


def test_the_fits_are_lines_through_what_was_measured():
    points = [{"idle": n, "idle_share_effective": 0.1 + 0.01 * n} for n in (1, 3, 7)]
    fit = idle_fit(points)["share"]
    assert fit is not None
    assert fit["intercept"] == pytest.approx(0.1) and fit["slope"] == pytest.approx(0.01)
    measured = [
        {"status": "ok", "peers": p, "message_call_us": 1.0, "empty_call_us": 0.5, "wall_us_per_message": 2 + p,
         "cpu_us_per_message": 1 + 0.5 * p}
        for p in (1, 3)
    ]  # fmt: skip
    assert receive_fit(measured)["cpu_us_per_message"] == pytest.approx({"intercept": 1.0, "slope": 0.5})
    assert iterations_for(1.0) >= 1 and spin(10) == spin(10)


def test_it_refuses_to_run_inside_a_job():
    completed = mailrail("simulate", "measure-idle", env={"OMPI_COMM_WORLD_SIZE": "2"})
    assert completed.returncode == 2 and "run it without mpiexec" in completed.stderr


def test_it_refuses_an_mpi_whose_transports_it_cannot_choose_naming_it(monkeypatch, capsys):
    """Its transports are Open MPI's (OMPI_MCA_btl): under MPICH they would be ignored, and the figures mislabelled."""
    mpich = launchers.MPIOrigin("MPICH Version: 4.0.2", "/usr/lib/libmpich.so.12", "mpich", None, "4.0.1", {})
    monkeypatch.setattr(launchers, "mpi_origin", lambda: mpich)
    monkeypatch.delenv("OMPI_COMM_WORLD_SIZE", raising=False)
    monkeypatch.delenv("PMI_SIZE", raising=False)
    parser = argparse.ArgumentParser()
    idle.add_arguments(parser)
    assert idle.run(parser.parse_args([])) == 2
    error = capsys.readouterr().err
    assert "MPICH Version: 4.0.2 (a site MPI: /usr/lib/libmpich.so.12)" in error and "Open MPI" in error
