"""The cluster's plain data, without root: units, shapes, names, tc commands, hostfiles, the ssh stand-in."""

from __future__ import annotations

import os
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailrail.errors import ClusterError
from mailrail_tools.cluster.spec import (
    MAX_NODES,
    ClusterSpec,
    Layout,
    Link,
    Queue,
    agent_script,
    hostfile,
    link_commands,
    new_cluster_id,
    node_of_rank,
    parse_duration,
    parse_memory,
    parse_node_count,
    parse_queue,
    parse_rate,
    ranks_per_node,
    tc_commands,
)


@pytest.mark.parametrize(
    "text, bits",
    [
        ("10gbit", 10**10),
        ("500mbit", 5 * 10**8),
        ("1.5gbit", 15 * 10**8),
        ("125mbps", 10**9),
        ("8000bit", 8000),
        ("2 Gbit", 2 * 10**9),
    ],
)
def test_rates_in_tc_units(text, bits):
    assert parse_rate(text) == bits


@pytest.mark.parametrize(
    "text, seconds", [("50us", 50e-6), ("1ms", 1e-3), ("2s", 2.0), ("100usec", 1e-4), ("500ns", 5e-7)]
)
def test_delays_in_tc_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text, size",
    [("1G", 2**30), ("512M", 2**29), ("384MiB", 384 * 2**20), ("2gb", 2**31), ("67108864", 2**26), ("1.5G", 3 * 2**29)],
)
def test_memory_sizes_are_powers_of_1024(text, size):
    assert parse_memory(text) == size


@pytest.mark.parametrize(
    "text, queue",
    [
        ("100p", Queue(100, "packets")),
        ("64packets", Queue(64, "packets")),
        ("256kb", Queue(256 * 1024, "bytes")),
        ("1mb", Queue(2**20, "bytes")),
        ("65536", Queue(65536, "bytes")),
    ],
)
def test_queues_in_packets_or_bytes(text, queue):
    assert parse_queue(text) == queue


@pytest.mark.parametrize(
    "parse, text, words",
    [
        (parse_rate, "10gbits", ["--link-rate", "unknown rate unit 'gbits'", "'10gbits'"]),
        (parse_rate, "10", ["--link-rate", "unknown rate unit '(none)'"]),
        (parse_rate, "fast", ["--link-rate", "'fast' is not a rate such as 10gbit"]),
        (parse_rate, "100bit", ["--link-rate", "below 8kbit"]),
        (parse_duration, "5", ["--link-delay", "unknown time unit '(none)'"]),
        (parse_duration, "5 min", ["--link-delay", "unknown time unit 'min'"]),
        (parse_memory, "1Q", ["--node-memory", "unknown memory unit 'q'", "'1Q'"]),
        (parse_memory, "1M", ["--node-memory", "below 16M"]),
        (parse_memory, "-1G", ["--node-memory", "'-1G' is not a memory such as 1G"]),
        (parse_queue, "1.5p", ["--link-queue", "whole number of packets"]),
        (parse_queue, "100x", ["--link-queue", "unknown queue unit 'x'"]),
        (parse_queue, "100b", ["--link-queue", "less than one full-size packet"]),
    ],
)
def test_bad_units_name_the_option_and_the_value(parse, text, words):
    with pytest.raises(ClusterError) as error:
        parse(text)
    for word in words:
        assert word in str(error.value)


@given(st.integers(1, 10**6), st.sampled_from(["k", "M", "G"]))
def test_memory_round_trip(value, unit):
    scale = {"k": 2**10, "M": 2**20, "G": 2**30}[unit]
    if value * scale < 16 * 2**20:
        with pytest.raises(ClusterError):
            parse_memory(f"{value}{unit}")
    else:
        assert parse_memory(f"{value}{unit}") == value * scale


@pytest.mark.parametrize("text", ["0", "-2", "x", "251", "2.5"])
def test_node_counts(text):
    with pytest.raises(ClusterError) as error:
        parse_node_count(text)
    assert "--cluster" in str(error.value) and text in str(error.value)
    assert parse_node_count("4") == 4 and parse_node_count(str(MAX_NODES)) == MAX_NODES


def test_ranks_fill_nodes_in_blocks():
    assert ranks_per_node(16, 4) == [4, 4, 4, 4]
    assert ranks_per_node(17, 4) == [5, 4, 4, 4]
    assert ranks_per_node(9, 4) == [3, 2, 2, 2]
    assert ranks_per_node(4, 4) == [1, 1, 1, 1]
    assert node_of_rank([3, 3, 2]) == [0, 0, 0, 1, 1, 1, 2, 2]


@pytest.mark.parametrize(
    "ranks, nodes, slots, words",
    [
        (4, 8, None, ["4 rank(s) cannot fill 8 nodes"]),
        (16, 4, 2, ["16 ranks do not fit on 4 nodes of 2 slots", "at most 8"]),
        (0, 1, None, ["-n must be >= 1"]),
    ],
)
def test_jobs_that_do_not_fit_are_refused_with_the_numbers(ranks, nodes, slots, words):
    with pytest.raises(ClusterError) as error:
        ranks_per_node(ranks, nodes, slots)
    for word in words:
        assert word in str(error.value)


def test_memory_caps_per_node():
    spec = ClusterSpec(nodes=4, node_memory=2**30, victim_node_memory=2**28, victim_nodes=(1,))
    assert [spec.memory_limit(n) for n in range(4)] == [2**30, 2**28, 2**30, 2**30]
    assert ClusterSpec(nodes=2, victim_node_memory=2**28, victim_nodes=(0,)).memory_limit(1) is None
    assert not ClusterSpec(nodes=2).memory_capped
    with pytest.raises(ClusterError, match=r"victim node\(s\) \[4\] outside"):
        ClusterSpec(nodes=4, victim_nodes=(4,))


def test_layout_names_everything_from_the_id():
    layout = Layout("j1a2b3", 3)
    assert layout.netns(None) == "mailrail-j1a2b3-head" and layout.netns(2) == "mailrail-j1a2b3-n2"
    assert layout.hostname(0) == "j1a2b3-n0" and layout.address(0) == "10.213.0.1"
    assert layout.address(None) == "10.213.0.254"
    assert layout.all_netns() == [
        "mailrail-j1a2b3-head",
        "mailrail-j1a2b3-n0",
        "mailrail-j1a2b3-n1",
        "mailrail-j1a2b3-n2",
    ]
    with pytest.raises(ClusterError, match="1-12 lower-case letters or digits"):
        Layout("Bad-Name", 1)


def test_job_cluster_ids_are_valid_and_distinct():
    ids = {new_cluster_id(pid, entropy) for pid in (1, 4242, 2**22 - 1) for entropy in (0, 1, 2**20 - 1)}
    assert len(ids) == 9
    for cluster_id in ids:
        Layout(cluster_id, 1)


def test_tc_rate_delay_and_queue():
    assert tc_commands("eth0", Link()) == []
    rate = tc_commands("eth0", Link(rate_bps=10**9))
    assert rate == [
        [
            "tc",
            "qdisc",
            "replace",
            "dev",
            "eth0",
            "root",
            "handle",
            "1:",
            "tbf",
            "rate",
            "1000000000bit",
            "burst",
            "125000",
            "limit",
            "1250000",
        ]
    ]
    both = tc_commands("n0", Link(rate_bps=10**8, delay_s=50e-6, queue=Queue(100, "packets")))
    assert both[0][5:9] == ["root", "handle", "1:", "tbf"]
    assert both[1] == [
        "tc",
        "qdisc",
        "replace",
        "dev",
        "n0",
        "parent",
        "1:1",
        "handle",
        "10:",
        "netem",
        "delay",
        "50us",
        "limit",
        "100",
    ]
    queue_only = tc_commands("eth0", Link(queue=Queue(65536, "bytes")))
    assert queue_only == [["tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "bfifo", "limit", "65536"]]
    bytes_with_rate = tc_commands("eth0", Link(rate_bps=10**9, queue=Queue(2**20, "bytes")))
    assert len(bytes_with_rate) == 1 and bytes_with_rate[0][-2:] == ["limit", str(2**20)]


def test_a_link_with_a_queue_carries_frames_of_one_segment():
    """A queue holds frames, as a switch port does: never a whole 64 KiB offload packet dropped at once."""
    assert link_commands("eth0", Link()) == [] and link_commands("eth0", Link(rate_bps=10**9)) == []
    for queue in (Queue(16384, "bytes"), Queue(100, "packets")):
        link = Link(rate_bps=5 * 10**8, queue=queue)
        assert link.frames_only and link.describe()["frames_only"] is True
        assert link_commands("n3", link) == [["ip", "link", "set", "dev", "n3", "gso_max_segs", "1"]]
    assert Link(rate_bps=10**9).describe()["frames_only"] is False


def test_hostfiles_per_launcher():
    layout = Layout("c1", 3)
    assert hostfile(layout, [4, 4, 2], "openmpi") == "10.213.0.1 slots=4\n10.213.0.2 slots=4\n10.213.0.3 slots=2\n"
    assert hostfile(layout, [2, 1, 0], "mpich") == "10.213.0.1:2\n10.213.0.2:1\n"


def test_the_ssh_stand_in_enters_the_node_it_is_asked_for(tmp_path):
    """Run the generated script with a recording nsenter: ssh options skipped, host found, cgroup joined."""
    layout = Layout("t1", 2)
    fake_nsenter = tmp_path / "nsenter"
    fake_nsenter.write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    fake_nsenter.chmod(0o755)
    groups = [tmp_path / f"cg{i}" for i in range(3)]
    for group in groups:
        group.mkdir()
    agent = tmp_path / "agent"
    agent.write_text(
        agent_script(
            layout, [f"/state/{n}.uts" for n in ("n0", "n1", "head")], [[str(g)] for g in groups], str(fake_nsenter)
        )
    )
    agent.chmod(0o755)

    def call(*args):
        return subprocess.run([str(agent), *args], capture_output=True, text=True)

    shell = call("-x", "-o", "BatchMode=yes", "10.213.0.2", "prted", "--flag", "x y")
    assert shell.returncode == 0, shell.stderr
    assert shell.stdout.splitlines() == [
        "--net=/run/netns/mailrail-t1-n1",
        "--uts=/state/n1.uts",
        "--",
        "/bin/sh",
        "-c",
        "prted --flag x y",
    ]
    pid_line = (groups[1] / "cgroup.procs").read_text().strip()
    assert pid_line.isdigit()  # the stand-in joined node 1's cgroup before entering it
    direct = call("--exec", "head", "mpiexec", "-n", "2", "a b")
    assert direct.stdout.splitlines() == [
        "--net=/run/netns/mailrail-t1-head",
        "--uts=/state/head.uts",
        "--",
        "mpiexec",
        "-n",
        "2",
        "a b",
    ]
    unknown = call("10.213.0.77", "true")
    assert unknown.returncode == 255 and "no node named 10.213.0.77" in unknown.stderr
    assert os.access(agent, os.X_OK)
