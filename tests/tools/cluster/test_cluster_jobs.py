"""Real MPI jobs on real virtual clusters: nodes, links, delivery, memory caps, cleanup, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from helpers import (
    BINARY_TRACE,
    OwnClusters,
    alive,
    assert_credit_requests_accounted,
    assert_exactly_once,
    assert_left_nothing,
    job_environment,
    mailrail,
    program,
    ready_pids,
    result_of,
)
from mailrail.flow import MODE_NAMES
from mailrail_tools.cluster import ClusterSpec, Link, VirtualCluster, namespaces

pytestmark = [pytest.mark.mpi, pytest.mark.cluster]


def cluster_job(cluster: VirtualCluster, ranks: int, name: str, *args: str, env: dict | None = None):
    job = cluster.run(ranks, [*program(name), *args], timeout=180, capture=True, env=job_environment(**(env or {})))
    assert not job.timed_out, f"{name} hung:\n{job.stdout[-3000:]}\n{job.stderr[-3000:]}"
    return job, result_of(subprocess.CompletedProcess(job.argv, job.returncode, job.stdout, job.stderr))


@pytest.mark.smoke
def test_mpi_sees_the_virtual_nodes_and_only_internode_bytes_cross_the_links(leaves_nothing):
    with VirtualCluster(ClusterSpec(nodes=2)) as cluster:
        job, result = cluster_job(cluster, 4, "cluster_probe.py", "--bytes", str(20_000_000))
    ranks = result["ranks"]
    assert [r["host"] for r in ranks] == [cluster.layout.hostname(n) for n in (0, 0, 1, 1)]
    assert {r["shared_size"] for r in ranks} == {2}  # COMM_TYPE_SHARED: a virtual node, not the machine
    assert {r["nodes"] for r in ranks} == {2} and [r["node"] for r in ranks] == [0, 0, 1, 1]
    assert result["intra_node_pair"] and sum(r["checked"] for r in ranks) == 2
    # 20 MB went from node 0 to node 1 over the link (plus headers and start-up traffic); the other
    # 20 MB stayed in node 0's shared memory.
    assert 20_000_000 <= job.network_bytes < 30_000_000
    assert not job.out_of_memory and job.ok


def test_two_clusters_at_once_do_not_collide(leaves_nothing):
    """Same addresses, separate switches: each job sees only its own cluster's nodes, at the same time."""
    import concurrent.futures

    with VirtualCluster(ClusterSpec(nodes=2)) as first, VirtualCluster(ClusterSpec(nodes=2)) as second:
        assert first.layout.cluster_id != second.layout.cluster_id
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            jobs = list(
                pool.map(lambda c: cluster_job(c, 4, "cluster_probe.py", "--bytes", "1000000"), (first, second))
            )
    for cluster, (job, result) in zip((first, second), jobs):
        assert {r["host"] for r in result["ranks"]} == {cluster.layout.hostname(0), cluster.layout.hostname(1)}
        assert 1_000_000 <= job.network_bytes < 2_000_000


@pytest.fixture(scope="module")
def four_nodes(cluster_support):
    with OwnClusters() as own:
        with VirtualCluster(ClusterSpec(nodes=4)) as cluster:
            yield cluster
        assert_left_nothing(own)


@pytest.mark.parametrize("pattern", ["uniform", "incast"])
@pytest.mark.parametrize("mode", list(MODE_NAMES))
def test_exactly_once_across_four_nodes(four_nodes, mode, pattern):
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RECV_POOL_SLOTS": "16", "MAILRAIL_SEND_POOL_SLOTS": "8"}
    job, result = cluster_job(
        four_nodes, 8, "traffic.py", "--pattern", pattern, "--max-messages", "400", "--victims", "1", env=env
    )
    assert_exactly_once(result)
    stats = result["stats"]
    hosts = [s["host"] for s in stats]
    assert hosts == [four_nodes.layout.hostname(n // 2) for n in range(8)]
    assert job.network_bytes > 0
    if mode in ("node", "adaptive"):  # real nodes, found by MPI: no MAILRAIL_RANKS_PER_NODE anywhere
        assert {s["nodes"] for s in stats} == {4}


@pytest.mark.parametrize(
    "ranks, pattern",
    [
        *((8, pattern) for pattern in ("uniform", "incast", "hotspot", "sparse")),
        *(pytest.param(16, pattern, marks=pytest.mark.slow) for pattern in ("incast", "sparse")),
    ],
)
def test_adaptive_credits_with_one_receive_slot_across_four_nodes(four_nodes, ranks, pattern):
    """Adaptive credits on real nodes (found by MPI), one receive slot per rank: lent around, never overrun."""
    env = {"MAILRAIL_FLOW_CONTROL": "adaptive", "MAILRAIL_RECV_POOL_SLOTS": "1", "MAILRAIL_SEND_POOL_SLOTS": "4"}
    job, result = cluster_job(four_nodes, ranks, "traffic.py", "--pattern", pattern, "--max-messages", "80", env=env)
    assert_exactly_once(result)
    stats = result["stats"]
    assert {s["nodes"] for s in stats} == {4} and {s["credits_per_pair"] for s in stats} == {1}
    assert max(s["credit_window_high_water"] for s in stats) <= 1
    assert_credit_requests_accounted(stats, nodes=4)


@pytest.mark.smoke
def test_a_node_credit_pool_is_shared_by_the_ranks_of_one_virtual_node(leaves_nothing):
    """Rank 3 sends on credits its node neighbour rank 2 consumed: one pool per node, in that node's memory."""
    with VirtualCluster(ClusterSpec(nodes=2)) as cluster:
        job, result = cluster_job(cluster, 4, "node_share.py", "--real-nodes")
    credits = result["credits"]
    assert {s["nodes"] for s in result["stats"]} == {2}
    assert result["peak_from"][2] <= credits and result["peak_from"][3] == credits
    assert result["stats"][0]["messages_received"] == credits + 200


def test_links_are_shaped_both_ways(leaves_nothing):
    link = Link.parse("200mbit", queue="100p")
    with VirtualCluster(ClusterSpec(nodes=2, link=link)) as cluster:
        node_side = namespaces.run(["tc", "-n", cluster.layout.netns(1), "qdisc", "show", "dev", "eth0"], "test")
        switch_side = namespaces.run(["tc", "-n", cluster.layout.netns(None), "qdisc", "show", "dev", "n1"], "test")
        devices = [(cluster.layout.netns(1), "eth0"), (cluster.layout.netns(None), "n1")]
        offload = [
            namespaces.run(["ip", "-n", netns, "-d", "link", "show", "dev", dev], "test") for netns, dev in devices
        ]
        job, result = cluster_job(cluster, 2, "cluster_probe.py", "--bytes", str(2_000_000))
    for shown in (node_side, switch_side):
        assert "tbf 1: root" in shown and "rate 200Mbit" in shown and "pfifo 10: parent 1:1 limit 100p" in shown
    assert all(" gso_max_segs 1 " in shown for shown in offload), offload  # the queue holds frames
    assert sum(r["checked"] for r in result["ranks"]) == 1 and job.network_bytes >= 2_000_000


@pytest.mark.slow
def test_memory_capped_victim_node_kills_unconstrained_incast(tmp_path, as_root, leaves_nothing):
    # A victim that computes 50 us on each message cannot keep up with 7 senders: unconstrained, its MPI
    # buffered 324-701 MiB in three runs (with no work, sometimes 1 MiB: it kept up), far over the cap;
    # on a quiet machine its node once peaked at 189 MiB, just under a 192M cap.  Node credits peak at
    # 95 MiB a node: 160M keeps room for them and stays below what the unconstrained victim needs.
    out = tmp_path / "cmp"
    completed = mailrail(
        "compare",
        "--cluster",
        "2",
        "-n",
        "8",
        "--victims",
        "1",
        "--messages",
        "20000",
        "--receive-work-us",
        "50",
        "--trials",
        "1",
        "--modes",
        "none,node",
        "--victim-node-memory",
        "160M",
        "--out",
        str(out),
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    document = json.loads((out / "compare.json").read_text())
    cluster = document["cluster"]
    assert cluster["nodes"] == 2 and cluster["network"] == "tcp" and cluster["victim_node_memory"] == 160 * 2**20
    victim_node = document["workload"]["rank_nodes"][document["workload"]["victim_ranks"][0]]
    assert cluster["victim_nodes"] == [victim_node]
    none, node = document["modes"]["none"], document["modes"]["node"]
    assert none["status"] == "out_of_memory" and none["oom_nodes"] == [victim_node]
    # the first kill's moment is recorded, and the job was ended then, not at its time limit
    assert none["out_of_memory_node"] == victim_node and 0 < none["out_of_memory_after_s"] <= none["wall_s"]
    assert none["wall_s"] - none["out_of_memory_after_s"] < 10
    assert node["status"] == "ok" and node["summary"]["accounting_ok"]
    assert node["network_bytes"] >= node["summary"]["internode_payload_bytes"] > 0
    assert node["cluster_nodes"][victim_node]["peak_bytes"] < 160 * 2**20
    rows = {row["mode"]: row for row in document["table"]}
    assert rows["none"]["status"].startswith("out of memory (node") and rows["node"]["status"] == "ok"
    assert (
        "none: out of memory" in completed.stdout
        and "finished, every message delivered exactly once: node" in completed.stdout
    )
    assert (out / "compare.png").read_bytes().startswith(b"\x89PNG")


def test_a_job_past_its_timeout_leaves_nothing(leaves_nothing):
    completed = mailrail("run", "-n", "4", "--cluster", "2", "--timeout", "10", "--", *program("sleeper.py"))
    assert completed.returncode == 124 and "killed after 10 s" in completed.stderr
    pids = ready_pids(completed.stdout)
    assert len(pids) == 4 and not any(alive(pid) for pid in pids)


KILLED_AFTER_A_BARRIER = """import os, signal
from mpi4py import MPI
MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.rank == 2:
    os.kill(os.getpid(), signal.SIGKILL)
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.smoke
def test_a_rank_killed_on_another_node_is_said_in_one_line_and_leaves_nothing(tmp_path, leaves_nothing):
    """Its peers' MPI gives up over TCP (Open MPI: an error handler's lines, boxes, MPI_Abort; MPICH: Hydra's
    proxy lines and box): one line says what happened, the MPI's messages go to a log, /dev/shm is left clean."""
    killed = tmp_path / "killed.py"
    killed.write_text(KILLED_AFTER_A_BARRIER)
    completed = mailrail("run", "-n", "4", "--cluster", "2", "--", "python", str(killed), timeout=120)
    assert completed.returncode != 0
    for mark in ("-" * 74, "=" * 40, "] *** ", "[proxy:", "[mpiexec@"):
        assert mark not in completed.stderr + completed.stdout, completed.stderr
    last = completed.stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"mailrail run: the job failed with exit status \d+: (rank \d+ called MPI_Abort.*|a rank on \S+ ended "
        r"abnormally \(exit code 9\)|(rank 2|a rank on \S+) was killed by signal 9.*) \[the MPI's messages: \S+; -v "
        r"shows them\]",
        last,
    ), completed.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["-n", "4", "--cluster", "0"], "--cluster takes a node count >= 1"),
        (["-n", "4", "--cluster", "8"], "4 rank(s) cannot fill 8 nodes"),
        (["-n", "8", "--cluster", "2", "--node-slots", "2"], "8 ranks do not fit on 2 nodes of 2 slots"),
        (["-n", "4", "--cluster", "2", "--link-rate", "10gbits"], "--link-rate: unknown rate unit 'gbits'"),
        (["-n", "4", "--cluster", "2", "--node-memory", "1Q"], "--node-memory: unknown memory unit 'q'"),
        (["-n", "4", "--cluster", "2", "--victim-node-memory", "1G"], "say which with --victim-ranks"),
        (["-n", "4", "--link-rate", "1gbit"], "--link-rate describe a virtual cluster: add --cluster N"),
        (["-n", "4", "--cluster", "up:nosuch"], "no virtual cluster named nosuch is up"),
    ],
)
def test_bad_input_is_a_precise_error_and_leaves_nothing(args, message, leaves_nothing):
    completed = mailrail("run", *args, "--", "true", timeout=60)
    assert completed.returncode == 2
    assert message in completed.stderr


def test_a_delay_needs_netem_and_a_failed_build_leaves_nothing(leaves_nothing):
    completed = mailrail(
        "run", "-n", "2", "--cluster", "2", "--link-delay", "50us", "--", *program("cluster_probe.py"), timeout=120
    )
    if completed.returncode != 0:  # this kernel has no netem: say so, precisely, and undo the half-built cluster
        assert completed.returncode == 2 and "--link-delay needs the kernel's netem" in completed.stderr
    else:
        assert "RESULT" in completed.stdout


def unprivileged(*setup: str) -> list[str]:
    """A command prefix: this process's user id, seen as nobody in a user namespace with no capabilities."""
    return ["unshare", "--user", "--map-user=65534", "--map-group=65534", *setup]


def test_without_root_the_cluster_is_built_in_a_user_namespace(as_root, leaves_nothing):
    completed = mailrail("run", "-n", "4", "--cluster", "2", "--", *program("traffic.py"), prefix=unprivileged())
    result = result_of(completed)
    assert_exactly_once(result)
    assert len({s["host"] for s in result["stats"]}) == 2
    assert "inside a user namespace" in completed.stderr
    capped = mailrail("run", "-n", "4", "--cluster", "2", "--node-memory", "1G", "--", "true", prefix=unprivileged())
    assert capped.returncode == 2 and "need memory cgroups" in capped.stderr


def test_with_neither_root_nor_user_namespaces_a_clear_error(tmp_path, as_root, leaves_nothing):
    # Root in a user namespace that forbids further ones, its capabilities dropped: a user who can do neither.
    no_userns = [
        "unshare",
        "--user",
        "--map-root-user",
        "/bin/sh",
        "-c",
        'echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv --inh-caps=-all --bounding-set=-all "$@"',
        "sh",
    ]
    completed = mailrail("run", "-n", "2", "--cluster", "2", "--", "true", prefix=no_userns)
    assert completed.returncode == 2
    assert "needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)" in completed.stderr and "neither" in completed.stderr
    out = tmp_path / "cmp"
    fallback = mailrail(
        "compare",
        "-n",
        "2",
        "--nodes",
        "1",
        "--messages",
        "50",
        "--trials",
        "1",
        "--modes",
        "none",
        "--out",
        str(out),
        prefix=no_userns,
    )
    assert fallback.returncode == 0, fallback.stdout[-2000:] + fallback.stderr[-2000:]
    assert "mailrail compare: on shared memory: a virtual cluster needs root" in fallback.stdout
    document = json.loads((out / "compare.json").read_text())
    assert document["cluster"] is None and "needs root" in document["shared_memory_reason"]


def test_a_cluster_that_stays_up(as_root, leaves_nothing):
    name = f"t{os.getpid() % 100000}"
    up = mailrail("cluster", "up", "--nodes", "2", "--name", name, "--link-rate", "5gbit")
    assert up.returncode == 0, up.stderr
    try:
        status = json.loads(mailrail("cluster", "status", "--json").stdout)
        entry = next(e for e in status if e["name"] == name)
        assert (entry["kind"], entry["state"], entry["nodes"]) == ("persistent", "up", 2)
        assert entry["link"]["rate_bps"] == 5 * 10**9
        for _ in range(2):  # jobs come and go; the cluster stays
            result = result_of(
                mailrail("run", "-n", "4", "--cluster", f"up:{name}", "--", *program("cluster_probe.py"))
            )
            assert {r["host"] for r in result["ranks"]} == {f"{name}-n0", f"{name}-n1"}
        refused = mailrail("run", "-n", "4", "--cluster", f"up:{name}", "--link-rate", "1gbit", "--", "true")
        assert refused.returncode == 2 and "shape a cluster when it is made" in refused.stderr
        again = mailrail("cluster", "up", "--nodes", "2", "--name", name)
        assert again.returncode == 2 and f"a cluster named {name} exists already" in again.stderr
    finally:
        down = mailrail("cluster", "down", "--name", name)
    assert down.returncode == 0 and f"removed virtual cluster {name}" in down.stdout


def test_replay_on_a_cluster(tmp_path, leaves_nothing):
    out = tmp_path / "replay.json"
    completed = mailrail(
        "replay",
        str(BINARY_TRACE),
        "--cluster",
        "2",
        "--flow-control",
        "node",
        "--json",
        str(out),
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["verified"] and document["ranks"] == 2 and document["flow_control"] == "node"
    assert "2 ranks on virtual cluster" in completed.stderr


@pytest.mark.slow
def test_sweep_scales_over_node_counts(tmp_path, as_root, leaves_nothing):
    out = tmp_path / "sweep"
    completed = mailrail(
        "sweep",
        "--cluster",
        "2",
        "--node-ranks",
        "2",
        "--studies",
        "weak",
        "--messages",
        "200",
        "--trials",
        "1",
        "--modes",
        "none,node",
        "--victim-node-memory",
        "1G",
        "--out",
        str(out),
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads((out / "sweep.json").read_text())
    points = document["studies"]["weak"]
    assert [(p["ranks"], p["nodes"], p["mode"]) for p in points] == [
        (2, 1, "none"),
        (2, 1, "node"),
        (4, 2, "none"),
        (4, 2, "node"),
    ]
    assert all(p["status"] == "ok" for p in points) and document["cluster"]["nodes"] == 2
    assert points[2]["result"]["network_bytes"] > 0 and points[0]["result"]["network_bytes"] < 100_000
    for point in points:  # each run capped the node of its own victim, and only that node, during the run
        victim = point["result"]["victim_ranks"][0]
        limits = [n["limit_bytes"] for n in point["result"]["cluster_nodes"]]
        assert limits[victim // 2] == 2**30 and limits.count(None) == 1


@pytest.mark.parametrize(
    "app, args",
    [("cc", ["--scale", "10", "--edge-factor", "8"]), ("moe", ["--tokens", "64", "--hidden", "64", "--skew", "1.2"])],
)
def test_the_applications_on_a_cluster(tmp_path, app, args, leaves_nothing):
    out = tmp_path / f"{app}.json"
    completed = mailrail(
        "run",
        "-n",
        "4",
        "--cluster",
        "2",
        "app",
        app,
        *args,
        "--modes",
        "none,rank,node",
        "--baseline",
        "alltoallv",
        "--trials",
        "1",
        "--json",
        str(out),
    )
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["verified"] and document["ranks"] == 4 and len(document["runs"]) == 4
    assert "on virtual cluster" in completed.stderr


def test_a_shallow_link_queue_drops_packets_and_tcp_sends_them_again(tmp_path, leaves_nothing):
    """Two nodes send to a third over links of 50 Mb/s whose queues hold 4 packets: the victim's switch port
    drops, and each node's TCP counters (read in its own namespace) show the segments sent again."""
    out = tmp_path / "cmp"
    completed = mailrail(
        "compare", "--cluster", "3", "-n", "3", "--nodes", "3", "--victims", "1", "--messages", "3000", "--trials", "1",
        "--modes", "none", "--link-rate", "50mbit", "--link-queue", "4p", "--out", str(out),
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    nodes = json.loads((out / "compare.json").read_text())["modes"]["none"]["cluster_nodes"]
    assert sum(node["link_drops"] for node in nodes) > 0
    sent, again = sum(node["tcp_out_segs"] for node in nodes), sum(node["tcp_retrans_segs"] for node in nodes)
    assert 0 < again < sent
