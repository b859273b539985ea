"""The job runner's view of the MPI: which library mpi4py loads, its mpiexec, and what a job's environment gets.

Unit tests on made-up origins and files (no MPI), then the ``smoke`` checks that the environment the
suite runs in is the MPI it claims (``MAILRAIL_TEST_MPI``: ``wheel`` by default, ``site-openmpi`` or
``site-mpich`` under ``make test-site-mpi``).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from helpers import assert_succeeded, mailrail
from mailrail_tools.jobs.which_mpi import (
    MPI_WHEELS,
    WHEEL_SETTINGS,
    LaunchError,
    MPIOrigin,
    allocation_nodes,
    find_mpiexec,
    launch_settings,
    loaded_mpi_library,
    mpi_environment,
    mpi_flavor,
    mpi_origin,
    mpiexec_for,
    wheel_holding,
)

#: What the suite's environment runs: ``wheel`` (the project's .venv and .venv-mpich), ``site-openmpi``, ``site-mpich``.
TEST_MPI = os.environ.get("MAILRAIL_TEST_MPI", "wheel")
#: The four settings issue 23 found wrong for a site MPI (ob1 over a fabric is TCP, and so on).
TUNING = ("OMPI_MCA_pml", "OMPI_MCA_osc", "OMPI_MCA_mpi_yield_when_idle", "PRTE_MCA_prte_set_default_slots")


def origin(wheel: str | None, flavor: str | None = "openmpi", mpicc: str | None = None) -> MPIOrigin:
    version = {"openmpi": "Open MPI v4.1.4, package: Debian", "mpich": "MPICH Version: 4.0.2\nMPICH Device: ch4:ucx"}
    return MPIOrigin(
        library_version=version.get(flavor or "", "Intel(R) MPI Library 2021.9"),
        library_path="/usr/lib/x86_64-linux-gnu/libmpi.so.40",
        flavor=flavor,
        wheel=wheel,
        mpi4py_version="4.1.2",
        build_config={"mpicc": mpicc} if mpicc else {},
    )


@pytest.mark.parametrize(
    ("text", "flavor"),
    [
        ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution", "openmpi"),
        ("mpiexec.openmpi (OpenRTE) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/", "openmpi"),
        ("prterun (Open MPI) 5.0.11", "openmpi"),
        ("MPICH Version:      4.0.2\nMPICH Release date: Thu Apr  7 12:34:45 CDT 2022", "mpich"),
        ("HYDRA build details:\n    Version:   4.0.2", "mpich"),
        ("Intel(R) MPI Library 2021.9 for Linux* OS", None),
    ],
)
def test_the_flavor_is_read_from_library_and_launcher_texts(text, flavor):
    assert mpi_flavor(text) == flavor


def test_the_mapped_mpi_library_is_found_in_the_process_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f02-7f03 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0\n"
        "7f04-7f05 r--p 00000000 00:00 0 \n"
        "7f06-7f07 r--p 00000000 08:01 3 /opt/x/libmpi_mpifh.so.40\n"
    )
    assert loaded_mpi_library(str(maps)) == "/usr/lib/x86_64-linux-gnu/libmpich.so.12.2.0"
    maps.write_text("7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n")
    assert loaded_mpi_library(str(maps)) is None
    assert loaded_mpi_library(str(tmp_path / "absent")) is None


def fake_distribution(root, name: str, library: str) -> str:
    """A distribution *name* installed in *root* whose files include ``lib/LIBRARY``; the library's path."""
    info = root / f"{name}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "RECORD").write_text(f"lib/{library},,\n{info.name}/METADATA,,\n")
    (root / "lib").mkdir()
    path = root / "lib" / library
    path.write_bytes(b"")
    return str(path)


def test_a_wheel_is_the_distribution_that_holds_the_loaded_library(tmp_path, monkeypatch):
    wheel_library = fake_distribution(tmp_path, "fakempi", "libmpi.so.40")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert wheel_holding(wheel_library, ["fakempi"]) == "fakempi"
    # a site library of the same name elsewhere is not the wheel's, even with the wheel installed
    site = tmp_path / "site"
    site.mkdir()
    (site / "libmpi.so.40").write_bytes(b"")
    assert wheel_holding(str(site / "libmpi.so.40"), ["fakempi"]) is None
    assert wheel_holding(wheel_library, ["not-installed-mpi"]) is None
    assert wheel_holding(None, ["fakempi"]) is None


def test_a_site_mpi_gets_none_of_the_wheel_settings():
    settings = launch_settings({}, origin(wheel=None))
    assert settings.values == {}
    assert "site" in settings.reason and "Open MPI v4.1.4" in settings.reason
    assert settings.describe().startswith("set no MPI variables: ")


def test_the_open_mpi_wheel_on_one_machine_gets_its_settings_where_unset():
    base = {"OMPI_MCA_pml": "ucx"}  # the user's choice stays
    settings = launch_settings(base, origin(wheel="openmpi"))
    assert "OMPI_MCA_pml" not in settings.values
    expected = {**WHEEL_SETTINGS["openmpi"], **WHEEL_SETTINGS["any"]}
    assert settings.values == {key: value for key, value in expected.items() if key != "OMPI_MCA_pml"}
    assert settings.describe().startswith("set OMPI_ALLOW_RUN_AS_ROOT=1 ")
    assert "openmpi wheel on one machine" in settings.describe()


def test_the_mpich_wheel_gets_no_open_mpi_variables():
    settings = launch_settings({}, origin(wheel="mpich", flavor="mpich"))
    assert settings.values == WHEEL_SETTINGS["any"]
    assert not any(key.startswith(("OMPI_", "PRTE_")) for key in settings.values)


def test_without_mpi4py_nothing_is_set():
    assert launch_settings({}, None).values == {}


def test_a_wheel_spread_over_an_allocation_gets_nothing(tmp_path):
    assert launch_settings({"SLURM_JOB_NUM_NODES": "4"}, origin(wheel="openmpi")).values == {}
    assert launch_settings({"SLURM_JOB_NUM_NODES": "1"}, origin(wheel="openmpi")).values != {}
    nodefile = tmp_path / "nodes"
    nodefile.write_text("n1\nn1\nn2\n")
    assert allocation_nodes({"PBS_NODEFILE": str(nodefile)}) == 2
    assert "allocation of 2 nodes" in launch_settings({"PBS_NODEFILE": str(nodefile)}, origin(wheel="openmpi")).reason
    assert allocation_nodes({}) == 1


def fake_launcher(directory, name: str, says: str) -> str:
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_a_site_mpis_mpiexec_sits_beside_the_compiler_mpi4py_was_built_with(tmp_path, monkeypatch):
    site, other = tmp_path / "site", tmp_path / "other"
    site.mkdir()
    other.mkdir()
    fake_launcher(site, "mpicc.mpich", "mpicc")
    mpiexec = fake_launcher(site, "mpiexec.mpich", "HYDRA build details: Version 4.0.2")
    # the plain mpiexec first on PATH is the other MPI's (Debian's alternatives pick one)
    fake_launcher(other, "mpiexec", "mpiexec (OpenRTE) 4.1.4")
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{site}")
    assert mpiexec_for(origin(wheel=None, flavor="mpich", mpicc="mpicc.mpich")) == mpiexec
    # built with an absolute compiler path, its directory is searched first
    assert mpiexec_for(origin(wheel=None, flavor="mpich", mpicc=str(site / "mpicc.mpich"))) == mpiexec


def test_a_site_mpis_mpiexec_is_found_by_flavor_without_a_compiler(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    fake_launcher(bin_, "mpiexec", "HYDRA build details")
    right = fake_launcher(bin_, "mpiexec.openmpi", "mpiexec.openmpi (OpenRTE) 4.1.4")
    monkeypatch.setenv("PATH", str(bin_))
    assert mpiexec_for(origin(wheel=None, flavor="openmpi")) == right


def test_no_mpiexec_of_the_site_mpi_is_a_launch_error_naming_the_library(tmp_path, monkeypatch):
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    wrong = fake_launcher(bin_, "mpiexec", "HYDRA build details")
    monkeypatch.setenv("PATH", str(bin_))
    with pytest.raises(LaunchError, match="Open MPI v4.1.4") as error:
        mpiexec_for(origin(wheel=None, flavor="openmpi"))
    assert wrong in str(error.value)


# -- the environment the suite runs in ---------------------------------------------------------------


@pytest.mark.smoke
def test_this_environment_runs_the_mpi_it_claims():
    found = mpi_origin()
    assert found is not None
    if TEST_MPI == "wheel":
        assert found.wheel in MPI_WHEELS and found.flavor == found.wheel, found
        assert not found.build_config  # the PyPI mpi4py wheel loads the MPI wheel's library
    else:
        flavor = TEST_MPI.removeprefix("site-")
        assert found.wheel is None and found.flavor == flavor, found
        # the system's library, not one inside this environment
        assert not os.path.realpath(found.library_path).startswith(os.path.realpath(sys.prefix)), found
    version = subprocess.run([find_mpiexec(), "--version"], capture_output=True, text=True, timeout=60)
    assert mpi_flavor(version.stdout + version.stderr) == found.flavor


@pytest.mark.smoke
def test_jobs_get_the_tuning_only_on_a_wheel():
    env = mpi_environment(base={})
    found = mpi_origin()
    if TEST_MPI != "wheel":
        assert env == {}
    elif found.wheel == "openmpi":
        assert {key: env[key] for key in TUNING} == {key: WHEEL_SETTINGS["openmpi"][key] for key in TUNING}
    else:
        assert env == WHEEL_SETTINGS["any"]


@pytest.mark.mpi
@pytest.mark.smoke
def test_mailrail_run_says_what_it_set_and_info_reports_the_same_mpi(tmp_path):
    report = tmp_path / "info.json"
    completed = mailrail("run", "-n", "2", "info", "--json", str(report), timeout=180)
    assert_succeeded(completed)
    said = [line for line in completed.stderr.splitlines() if line.startswith("mailrail run: ")]
    assert len(said) == 1, completed.stderr
    document = json.loads(report.read_text())
    found = mpi_origin()
    assert document["mpi"]["library_path"] == found.library_path
    assert document["mpi4py"]["source"] == ("site" if TEST_MPI != "wheel" else "wheel")
    assert document["nodes"] == {
        "count": 1,
        "ranks": 2,
        "virtual": False,
        "detection": "real: ranks sharing memory (MPI_COMM_TYPE_SHARED)",
    }
    assert document["launcher"]["mpiexec"] == find_mpiexec()
    if TEST_MPI == "wheel":
        assert said[0].startswith("mailrail run: set "), said
    else:
        assert said[0].startswith("mailrail run: set no MPI variables: "), said
        assert "site" in said[0]
