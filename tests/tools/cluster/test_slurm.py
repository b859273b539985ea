"""Slurm on the virtual cluster: Debian's slurmctld, slurmd and munged in the namespaces, jobs through srun and sbatch.

One 2-node Slurm cluster (``mailrail cluster up --scheduler slurm``) serves the module; each test runs
its jobs on it through the commands a user types, and the module checks at the end that ``mailrail
cluster down`` left nothing (daemons, namespaces, cgroups, state).  The MPI is the wheel of the Python
running the tests: ``make test`` runs the smoke tests again with the MPICH wheel (Open MPI starts
through ``srun --mpi=pmix``, MPICH through ``--mpi=pmi2``).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from helpers import (
    ROOT,
    OwnClusters,
    alive,
    assert_exactly_once,
    assert_left_nothing,
    assert_succeeded,
    job_environment,
    mailrail,
    new_job_files,
    program_path,
    result_of,
    started_at,
    still_present,
    unclaimed_job_files,
)
from mailrail_tools.cluster import namespaces, slurm, state
from mailrail_tools.cluster.slurm import SlurmPaths
from mailrail_tools.cluster.spec import Layout

pytestmark = [pytest.mark.mpi, pytest.mark.cluster, pytest.mark.slurm]

NODES = 2
#: Seconds `cluster up` may take: on a fresh machine it installs Debian's packages first.
UP_TIMEOUT_S = 900
JOB_TIMEOUT_S = 180
TEMPLATES = ROOT / "examples" / "slurm"
BIN = os.path.dirname(sys.executable)


def slurm_skip_reason() -> str | None:
    """Why this machine cannot run the Slurm cluster (None: it can)."""
    if not namespaces.has_admin_capabilities() or os.geteuid() != 0:
        return "a Slurm virtual cluster needs root (its daemons outlive the command; packages come from apt-get)"
    return slurm.cannot_install()


def daemon_pids(name: str) -> dict[str, int]:
    return slurm.daemon_pids(SlurmPaths.of(state.state_dir(Layout(name, 1).name)))


def up(name: str, nodes: int) -> dict[str, int]:
    """``mailrail cluster up --scheduler slurm``; the daemons' pids it recorded."""
    up = ("cluster", "up", "--nodes", str(nodes), "--scheduler", "slurm", "--name", name)
    assert_succeeded(outside_a_job(*up, timeout=UP_TIMEOUT_S))
    return daemon_pids(name)


def down(name: str) -> None:
    assert_succeeded(outside_a_job("cluster", "down", "--name", name, timeout=120))


def outside_a_job(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``python -m mailrail_tools ARGS`` as a plain child of this process, not as a job (:func:`helpers.mailrail`).
    A job's runner is a subreaper while it runs: this process would adopt the daemons ``cluster up`` leaves running, and
    what the daemons leave when ``cluster down`` ends them, and only it could collect them, for which ``cluster
    down`` waits.  Started so, they go to init, as from a shell."""
    argv = [sys.executable, "-m", "mailrail_tools", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=job_environment(), timeout=timeout)


@pytest.fixture(scope="module")
def slurm_cluster(cluster_support) -> str:
    """The name of a running 2-node Slurm cluster; removed after the module, which must leave nothing."""
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"sl{os.getpid():x}"[:12]
    with OwnClusters() as own:
        daemons = started_at(up(name, NODES).values())
        try:
            yield name
        finally:
            down(name)
        assert still_present(daemons) == [], "cluster down returned before its daemons were gone"
        assert own.ids() == {name}
        assert_left_nothing(own)


def on_head(name: str, *command: str, env: dict[str, str] | None = None):
    return mailrail("cluster", "exec", "--name", name, "--", *command, timeout=JOB_TIMEOUT_S, env=env)


def test_cluster_up_runs_the_daemons_and_down_ends_them(cluster_support):
    reason = slurm_skip_reason()
    if reason:
        pytest.skip(reason)
    name = f"sd{os.getpid():x}"[:12]
    with OwnClusters() as own:
        pids = up(name, 1)
        daemons = started_at(pids.values())
        try:
            assert set(pids) == {"munged", "slurmctld", f"slurmd {name}-n0"}
            assert all(alive(pid) for pid in pids.values())
            status = json.loads(mailrail("cluster", "status", "--json").stdout)
            assert [e["scheduler"] for e in status if e["name"] == name] == ["slurm"]
        finally:
            down(name)
        # gone when down returns, not only out of the namespaces: pgrep would still list a zombie
        assert still_present(daemons) == [], "cluster down returned before its daemons were gone"
        assert own.ids() == {name}
        assert_left_nothing(own, bound=0)


def test_the_head_is_a_login_node_for_sinfo_and_srun(slurm_cluster):
    hosts = [f"{slurm_cluster}-n{n}" for n in range(NODES)]
    sinfo = on_head(slurm_cluster, "sinfo", "--noheader", "--Node", "--format=%N %T %c")
    assert_succeeded(sinfo)
    assert sorted(sinfo.stdout.splitlines()) == [f"{h} idle {slurm.DEFAULT_NODE_CPUS}" for h in hosts]
    ran = on_head(slurm_cluster, "srun", f"--nodes={NODES}", "hostname")
    assert_succeeded(ran)
    assert sorted(ran.stdout.split()) == hosts  # each slurmd under its node's own host name


def check_traffic_on_slurm_nodes(result: dict, name: str) -> None:
    """traffic.py delivered exactly once, its 4 ranks 2 per node, and MailRail found Slurm's 2 nodes."""
    assert_exactly_once(result)
    stats = result["stats"]
    assert [s["host"] for s in stats] == [f"{name}-n{n}" for n in (0, 0, 1, 1)]
    assert {s["nodes"] for s in stats} == {NODES}  # MPI's shared-memory split: Slurm's nodes, no RANKS_PER_NODE


TRAFFIC = ("traffic.py", "--pattern", "incast", "--max-messages", "300", "--victims", "1")


@pytest.mark.smoke
def test_mailrail_run_through_srun_delivers_exactly_once_on_slurms_nodes(slurm_cluster):
    run = mailrail(
        "run",
        "-n",
        "4",
        "--cluster",
        f"up:{slurm_cluster}",
        "--launcher",
        "srun",
        "--",
        "python",
        program_path(TRAFFIC[0]),
        *TRAFFIC[1:],
        timeout=JOB_TIMEOUT_S,
        env={"MAILRAIL_FLOW_CONTROL": "node", "MAILRAIL_RECV_POOL_SLOTS": "16"},
    )
    check_traffic_on_slurm_nodes(result_of(run), slurm_cluster)
    assert "through srun" in run.stderr


@pytest.mark.parametrize(
    "template, program",
    [
        pytest.param("mailrail-run.sbatch", ["python", program_path(TRAFFIC[0])], marks=pytest.mark.smoke),
        ("srun.sbatch", [program_path(TRAFFIC[0])]),
    ],
)
def test_the_sbatch_templates_run_a_mailrail_program(slurm_cluster, tmp_path, template, program):
    """mailrail-run.sbatch: `mailrail run` inside the allocation finds SLURM_JOB_ID and starts SLURM_NTASKS
    ranks with srun; srun.sbatch: srun itself, its --mpi plugin from SLURM_MPI_TYPE."""
    output = tmp_path / "job.out"
    submitted = on_head(
        slurm_cluster,
        "sbatch",
        "--wait",
        f"--output={output}",
        str(TEMPLATES / template),
        *program,
        *TRAFFIC[1:],
        env={
            "PATH": f"{BIN}:{os.environ.get('PATH', '')}",  # the job's `mailrail` is this environment's
            "PYTHON": sys.executable,
            "MAILRAIL_FLOW_CONTROL": "node",
            "MAILRAIL_RECV_POOL_SLOTS": "16",
        },
    )
    text = output.read_text() if output.exists() else "(no output file)"
    assert submitted.returncode == 0, f"{submitted.stderr[-3000:]}\n--- job output ---\n{text[-4000:]}"
    assert f"4 tasks on {slurm_cluster}-n[0-1]" in text
    for line in text.splitlines():
        if line.startswith("RESULT "):
            check_traffic_on_slurm_nodes(json.loads(line[len("RESULT ") :]), slurm_cluster)
            break
    else:
        pytest.fail(f"no RESULT line in the job's output:\n{text[-4000:]}")


def check_compare(out, allocation: bool) -> None:
    """Both modes finished on Slurm's 2 nodes, every byte delivered, started by srun."""
    document = json.loads((out / "compare.json").read_text())
    assert document["launcher"] == "srun"
    assert bool(document["workload"]["slurm_allocation"]) == allocation
    for mode, result in document["modes"].items():
        assert result["status"] == "ok", (mode, result.get("output_tail"))
        assert result["nodes"] == NODES and result["summary"]["accounting_ok"]
        assert all(t["bytes_received"] == 3 * 200 * 1024 for t in result["trials"])


COMPARE_SMALL = ("--messages", "200", "--trials", "1", "--datagram-size", "1024", "--modes", "none,node")


def test_compare_sbatch_template_runs_the_modes_through_srun_on_the_allocation(slurm_cluster, tmp_path):
    """Inside the batch job compare's --cluster auto is the allocation, its launcher srun."""
    output, out = tmp_path / "job.out", tmp_path / "compare"
    submitted = on_head(
        slurm_cluster,
        "sbatch",
        "--wait",
        f"--output={output}",
        str(TEMPLATES / "compare.sbatch"),
        *COMPARE_SMALL,
        "--out",
        str(out),
        env={"PATH": f"{BIN}:{os.environ.get('PATH', '')}"},
    )
    text = output.read_text() if output.exists() else "(no output file)"
    assert submitted.returncode == 0, f"{submitted.stderr[-3000:]}\n--- job output ---\n{text[-4000:]}"
    assert "through srun" in text and "- where: 2 node(s) of Slurm allocation " in text
    check_compare(out, allocation=True)


def test_compare_runs_its_modes_through_srun(slurm_cluster, tmp_path):
    out = tmp_path / "compare"
    compared = mailrail(
        "compare",
        "--cluster",
        f"up:{slurm_cluster}",
        "--launcher",
        "srun",
        "--ranks",
        "4",
        "--nodes",
        "2",
        *COMPARE_SMALL,
        "--victim-node-memory",
        "off",
        "--out",
        str(out),
        timeout=JOB_TIMEOUT_S,
    )
    assert_succeeded(compared)
    check_compare(out, allocation=False)
    assert json.loads((out / "compare.json").read_text())["cluster"]["scheduler"] == "slurm"


def test_a_failed_job_ends_its_ranks_and_leaves_the_daemons_running(slurm_cluster):
    """A job that fails is ended on every node, as on a cluster without Slurm, says so in one line and leaves
    nothing in /dev/shm (of its own: another job on the machine may leave its segments); the daemons stay for
    the next."""
    pids = daemon_pids(slurm_cluster)
    shared_memory = unclaimed_job_files()
    failed = mailrail(
        "run",
        "-n",
        "2",
        "--cluster",
        f"up:{slurm_cluster}",
        "--launcher",
        "srun",
        "--",
        "python",
        program_path("failing_command.py"),
        timeout=JOB_TIMEOUT_S,
    )
    assert failed.returncode != 0 and "injected failure in a mailrail command" in failed.stderr
    last = failed.stderr.strip().splitlines()[-1]
    assert re.match(
        r"mailrail run: the job failed with exit status \d+: rank 1 raised RuntimeError: injected failure in a "
        r"mailrail command \[the traceback in full( and the MPI's messages)?: \S+; -v shows them\]$",
        last,
    ), failed.stderr
    assert new_job_files(shared_memory, named={slurm_cluster}) == set()  # (its nodes name its segments)
    assert daemon_pids(slurm_cluster) == pids and all(alive(pid) for pid in pids.values())
    ran = on_head(slurm_cluster, "srun", f"--nodes={NODES}", "hostname")
    assert_succeeded(ran)
    assert sorted(ran.stdout.split()) == [f"{slurm_cluster}-n{n}" for n in range(NODES)]
