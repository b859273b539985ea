"""The MPI transport under a real mpiexec: exactly-once delivery and every error."""

import pytest

from helpers import assert_exactly_once, mpirun

pytestmark = pytest.mark.mpi

TINY_POOLS = {"MAILRAIL_SEND_POOL_SLOTS": "2", "MAILRAIL_RECV_POOL_SLOTS": "2"}
#: Both message paths of unconstrained mode; "compiled" fails (not falls back) if it is not built.
TRANSPORTS = ["compiled", "python"]


@pytest.mark.parametrize("ranks", [2, pytest.param(4, marks=pytest.mark.smoke), 8, 16])
def test_uniform_traffic_is_delivered_exactly_once(ranks):
    result = mpirun(ranks, "traffic.py", "--pattern", "uniform", "--max-messages", "200", "--seed", str(ranks))
    assert_exactly_once(result)


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("pattern", ["uniform", "incast"])
def test_tiny_pools_force_backpressure_without_loss(pattern, transport):
    result = mpirun(
        4,
        "traffic.py",
        "--pattern",
        pattern,
        "--max-messages",
        "150",
        env=dict(TINY_POOLS, MAILRAIL_IMPLEMENTATION=transport),
    )
    assert_exactly_once(result, transport)


@pytest.mark.parametrize("ranks", [2, 8])
def test_python_path_delivers_exactly_once(ranks):
    result = mpirun(
        ranks,
        "traffic.py",
        "--pattern",
        "uniform",
        "--max-messages",
        "200",
        "--seed",
        str(ranks),
        env={"MAILRAIL_IMPLEMENTATION": "python"},
    )
    assert_exactly_once(result, "python")


def test_many_to_one_incast_at_16_ranks():
    result = mpirun(16, "traffic.py", "--pattern", "incast", "--max-messages", "150")
    assert_exactly_once(result)
    victim = result["victims"][0]
    assert result["stats"][victim]["messages_received"] >= 15 * 75


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_fewer_posted_receives_than_slots(transport):
    result = mpirun(
        4,
        "traffic.py",
        "--max-messages",
        "150",
        env={"MAILRAIL_RECV_POOL_SLOTS": "8", "MAILRAIL_MAX_RECVS": "3", "MAILRAIL_IMPLEMENTATION": transport},
    )
    assert_exactly_once(result, transport)


@pytest.fixture(scope="module", params=TRANSPORTS)
def errors(request):
    result = mpirun(2, "errors.py", env={"MAILRAIL_IMPLEMENTATION": request.param})
    assert result["implementation"] == request.param
    return result


@pytest.mark.smoke
@pytest.mark.parametrize(
    "case, error, words",
    [
        ("config_keyword", "ConfigError", ["MAILRAIL_DATAGRAM_SIZE", "0"]),
        ("config_mode", "ConfigError", ["MAILRAIL_FLOW_CONTROL", "'bogus'"]),
        ("config_unknown", "TypeError", ["unexpected keyword argument", "datagram_sz"]),  # keyword-only knobs
        ("rank_mode_too_few_slots", "ConfigError", ["0 credits", "MAILRAIL_RECV_POOL_SLOTS=1", "node"]),
        (
            "compiled_node_mode_with_mpi_atomics",
            "ConfigError",
            ["MAILRAIL_IMPLEMENTATION=compiled", "MAILRAIL_ATOMICS=mpi"],
        ),
        ("dest_too_large", "InvalidDestinationError", ["destination 2", "0..1"]),
        ("dest_negative", "InvalidDestinationError", ["destination -1"]),
        ("dest_not_int", "InvalidDestinationError", ["'1'", "not an integer"]),
        ("coalescer_float_dests", "TypeError", ["dests have dtype float64", "must be integers"]),
        ("coalescer_dest_too_large", "InvalidDestinationError", ["destination 2", "0..1"]),
        ("nbytes_negative", "MessageSizeError", ["nbytes=-1", "0..64"]),
        ("nbytes_too_large", "MessageSizeError", ["nbytes=65", "0..64"]),
        ("foreign_buffer", "BufferOwnershipError", ["not reserved"]),
        ("non_contiguous", "BufferOwnershipError", ["contiguous", "strides (2,)"]),
        ("finalize_strict_reserved", "UndeliveredError", ["1 reserved send buffer(s) never sent"]),
        ("buffer_sent_twice", "BufferOwnershipError", ["in flight", "once per reserve_send_buffer"]),
        ("release_twice", "ReleaseError", ["already released"]),
        ("release_foreign", "ReleaseError", ["'not a message'", "not a message received from this MailRail"]),
        ("release_other_rails_message", "ReleaseError", ["not a message received from this MailRail"]),
        ("reserve_after_finalize", "FinalizedError", ["reserve_send_buffer", "after finalize"]),
        ("send_after_finalize", "FinalizedError", ["send(dest=0)", "after finalize"]),
        ("receive_after_finalize", "FinalizedError", ["receive()"]),
        ("release_after_finalize", "FinalizedError", ["release_receive_buffer()"]),
        ("barrier_after_finalize", "FinalizedError", ["barrier()"]),
        ("finalize_twice", "FinalizedError", ["twice"]),
        ("finalize_strict", "UndeliveredError", ["1 arrived message(s) never returned by receive()"]),
    ],
)
def test_misuse_raises_a_precise_error(errors, case, error, words):
    raised, message = errors[case]
    assert raised == error, (case, raised, message)
    for word in words:
        assert word in message, (case, word, message)


def test_the_rail_names_its_communicator_rank_and_size(errors):
    assert errors["rail_shape"] == [True, True, True]


def test_stats_and_the_rail_name_the_implementation_and_why(errors):
    assert "implementation" in errors["stats_keys"]
    assert "transport" not in errors["stats_keys"] and "engine" not in errors["stats_keys"]
    expected = None if errors["implementation"] == "compiled" else "MAILRAIL_IMPLEMENTATION=python"
    assert errors["implementation_reason"] == expected


@pytest.mark.smoke
def test_a_send_that_raises_gives_the_reserved_buffer_back(errors):
    assert errors["reserved_counted"] == [1, 1]  # counted, and pending
    for case in ("dest_too_large", "dest_negative", "dest_not_int", "nbytes_negative", "nbytes_too_large"):
        assert errors[f"{case}_reserved_after"] == [0, 0], case


def test_a_refused_non_contiguous_view_leaves_its_slot_reserved(errors):
    assert errors["non_contiguous_reserved_after"] == [1, 1]


def test_finalize_reports_reserved_buffers_never_sent(errors):
    report = errors["finalize_reserved_report"]
    assert report == {"deferred": 0, "unreleased": 0, "unreceived": 0, "reserved": 1, "staged": 0, "unanswered": 0}
    assert len(errors["finalize_reserved_warnings"]) == 1
    assert "1 reserved send buffer(s) never sent" in errors["finalize_reserved_warnings"][0]


@pytest.mark.parametrize("mode", ["none_None", "rank_None", "node_None", "node_1"])
def test_stats_after_finalize_work_in_every_mode(errors, mode):
    assert errors[f"stats_after_finalize_{mode}"] == ["no error", ""]


def test_full_send_pool_returns_none_not_an_error(errors):
    outcome, failures = errors["pool_exhausted"]
    assert outcome == "None" and failures == 1


def test_a_finalized_rail_is_collected(errors):
    assert errors["finalized_rail_collected"] is True


def test_the_credit_budget_is_checked_before_any_communicator_is_duplicated(errors):
    raised, message = errors["budget_checked_first"]
    assert raised == "ConfigError" and "MAILRAIL_RECV_POOL_SLOTS=1" in message
    assert errors["communicators_after_bad_budget"] == [0, 0]


def test_what_construction_made_is_freed_when_a_later_check_fails(errors):
    raised, message = errors["node_budget_checked_after_split"]
    assert raised == "ConfigError" and "MAILRAIL_CREDITS_PER_PAIR=5" in message
    made, freed = errors["communicators_after_bad_node_budget"]
    assert made == 3 and freed == made  # the three duplicates (the node's split is freed by the same stack)


def test_an_unfinalized_rail_is_collected_with_a_resource_warning(errors):
    unfinalized = errors["unfinalized_rail"]
    assert unfinalized["rail_collected"] and unfinalized["transport_collected"]
    assert len(unfinalized["warnings"]) == 1
    assert unfinalized["label"] in unfinalized["warnings"][0] and "without finalize()" in unfinalized["warnings"][0]
    assert errors["rail_after_unfinalized"] == 1  # MPI still works: the next rail delivers


def test_received_data_is_a_read_only_view(errors):
    assert errors["message_readonly"][0] == "False"


def test_finalize_reports_what_was_never_delivered(errors):
    report, warnings = errors["finalize_report"]
    assert report == {"deferred": 0, "unreleased": 1, "unreceived": 1, "reserved": 0, "staged": 0, "unanswered": 0}
    assert len(warnings) == 1
    assert "1 received message(s) never released" in warnings[0]
    assert "1 arrived message(s) never returned by receive()" in warnings[0]
