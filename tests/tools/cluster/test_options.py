"""The cluster flags: --cluster values, the flags each rank must not see, job specs."""

from __future__ import annotations

import argparse

import pytest

from mailrail.errors import ClusterError
from mailrail_tools.cluster.options import (
    ClusterChoice,
    add_cluster_arguments,
    build_spec,
    cluster_spec,
    node_flags_given,
    parse_ranks,
    without_cluster_flags,
)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cluster_arguments(parser, victims=True)
    return parser.parse_args(argv)


def test_cluster_choices():
    assert ClusterChoice.parse(None) == ClusterChoice("off")
    assert ClusterChoice.parse("4") == ClusterChoice("nodes", nodes=4)
    assert ClusterChoice.parse("up") == ClusterChoice("up", name="main")
    assert ClusterChoice.parse("up:lab") == ClusterChoice("up", name="lab")
    assert ClusterChoice.parse("auto", allow_auto=True) == ClusterChoice("auto")


@pytest.mark.parametrize(
    "text, allow_auto, words",
    [
        ("0", False, ["--cluster takes a node count >= 1", "got '0'", "must be a node count >= 1, got 0"]),
        ("auto", False, ["--cluster takes", "got 'auto'"]),
        ("many", True, ["'auto' or 'off'", "got 'many'"]),
        ("300", False, ["at most 250 nodes"]),
    ],
)
def test_bad_cluster_values(text, allow_auto, words):
    with pytest.raises(ClusterError) as error:
        ClusterChoice.parse(text, allow_auto=allow_auto)
    for word in words:
        assert word in str(error.value)


def test_each_rank_runs_the_command_without_the_cluster_flags():
    argv = [
        "replay",
        "DIR",
        "--cluster",
        "4",
        "--flow-control",
        "node",
        "--link-rate=1gbit",
        "--node-memory",
        "1G",
        "--json",
        "r.json",
    ]
    assert without_cluster_flags(argv) == ["replay", "DIR", "--flow-control", "node", "--json", "r.json"]


def test_node_flags_without_a_cluster_are_reported():
    assert node_flags_given(parse("--link-rate", "1gbit", "--victim-ranks", "3")) == ["--link-rate", "--victim-ranks"]
    assert node_flags_given(parse()) == []


def test_job_spec_caps_the_nodes_of_the_victims():
    spec = build_spec(
        parse("--victim-node-memory", "384M", "--link-rate", "1gbit"), nodes=4, ranks=16, victim_ranks=[7, 13]
    )
    assert spec.victim_nodes == (1, 3) and spec.victim_node_memory == 384 * 2**20
    assert spec.link.rate_bps == 10**9 and spec.memory_limit(0) is None


@pytest.mark.parametrize(
    "argv, ranks, victims, words",
    [
        (
            ["--victim-node-memory", "1G"],
            8,
            [],
            ["--victim-node-memory caps the nodes of the victim ranks", "--victim-ranks"],
        ),
        (["--node-memory", "lots"], 8, [], ["--node-memory", "'lots' is not a memory such as 1G"]),
        ([], 8, [9], ["--victim-ranks [9] outside the job's ranks 0..7"]),
        (["--node-slots", "1"], 8, [], ["8 ranks do not fit on 4 nodes of 1 slots"]),
    ],
)
def test_bad_job_specs(argv, ranks, victims, words):
    with pytest.raises(ClusterError) as error:
        build_spec(parse(*argv), nodes=4, ranks=ranks, victim_ranks=victims)
    for word in words:
        assert word in str(error.value)


def test_victim_rank_lists():
    assert parse_ranks("3, 1,3") == [1, 3] and parse_ranks(None) == []
    with pytest.raises(ClusterError, match="--victim-ranks takes comma-separated rank numbers, got 'a,b'"):
        parse_ranks("a,b")


def test_the_flags_describe_a_new_cluster_as_its_spec():
    args = parse("--cluster", "4", "--victim-node-memory", "384M", "--link-rate", "1gbit")
    choice = ClusterChoice.parse(args.cluster)
    assert cluster_spec(args, choice, 16, [7, 13]) == build_spec(args, nodes=4, ranks=16, victim_ranks=[7, 13])


@pytest.mark.parametrize("argv", [["--link-rate", "1gbit"], ["--link-delay", "1ms", "--node-slots", "2"]])
def test_a_job_on_the_running_cluster_may_not_shape_it(argv):
    """Refused from the flags alone, before the running cluster is looked up (none is up here)."""
    args = parse("--cluster", "up:nonesuch", *argv)
    with pytest.raises(ClusterError, match="shape a cluster when it is made.*running cluster nonesuch"):
        cluster_spec(args, ClusterChoice.parse(args.cluster), 4)


def test_a_job_on_a_cluster_that_is_not_up_is_told_how_to_make_one():
    args = parse("--cluster", "up:nonesuch")
    with pytest.raises(ClusterError, match="no virtual cluster named nonesuch is up"):
        cluster_spec(args, ClusterChoice.parse(args.cluster), 4)
