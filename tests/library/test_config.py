"""Config: defaults, MAILRAIL_* environment variables, keyword overrides, validation."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import warnings

import pytest

from mailrail import failure
from mailrail.config import (
    KNOBS,
    MPI_INT_MAX,
    NON_KNOB_VARIABLES,
    Config,
    default,
    default_pool_slots,
    env_name,
    knobs,
    physical_memory,
)
from mailrail.errors import ConfigError, ConfigWarning
from mailrail.flow import MODE_NAMES
from mailrail_tools.flags import add_rail_arguments
from mailrail_tools.jobs import control


def test_defaults_with_an_empty_environment():
    config = Config.from_env({})
    assert config == Config()
    assert config.datagram_size == 32768
    assert config.send_pool_slots == 128
    assert config.recv_pool_slots == 256
    assert config.max_recvs is None
    assert config.posted_receives == 256
    assert config.flow_control == "none"
    assert config.credit_threshold == 2
    assert config.piggyback is True
    assert config.ranks_per_node is None
    assert config.credits_per_pair is None
    assert config.stall_timeout == 0.0
    assert config.slow_rank_warning == 60.0
    assert config.idle_sleep_us == 0.0
    assert config.atomics == "auto"
    assert config.implementation == "auto"
    assert config.trace is None


def test_unset_pools_hold_their_memory_at_the_datagram_size_within_bounds():
    sizes = (512, 4096, 16384, 24576, 32768, 65536, 1 << 20)
    assert [default_pool_slots(size) for size in sizes] == [
        (256, 512), (256, 512), (256, 512), (170, 341), (128, 256), (128, 256), (128, 256)
    ]  # fmt: skip
    small = Config.from_env({"MAILRAIL_DATAGRAM_SIZE": "4096"})
    assert (small.send_pool_slots, small.recv_pool_slots, small.posted_receives) == (256, 512, 512)
    assert Config(datagram_size=4096) == small
    chosen = Config.from_env({"MAILRAIL_DATAGRAM_SIZE": "4096", "MAILRAIL_RECV_POOL_SLOTS": "64"})
    assert (chosen.send_pool_slots, chosen.recv_pool_slots) == (256, 64)  # a pool set is the one set
    assert (default("send_pool_slots"), default("recv_pool_slots")) == (128, 256)


def test_from_env_reads_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("MAILRAIL_DATAGRAM_SIZE", "1234")
    assert Config.from_env().datagram_size == 1234


def test_env_name_is_the_uppercased_knob_with_prefix():
    assert env_name("datagram_size") == "MAILRAIL_DATAGRAM_SIZE"
    assert env_name("stall_timeout") == "MAILRAIL_STALL_TIMEOUT"


def test_every_knob_is_read_from_its_environment_variable():
    environ = {
        "MAILRAIL_DATAGRAM_SIZE": "1024",
        "MAILRAIL_SEND_POOL_SLOTS": "16",
        "MAILRAIL_RECV_POOL_SLOTS": "64",
        "MAILRAIL_MAX_RECVS": "32",
        "MAILRAIL_FLOW_CONTROL": "rank",
        "MAILRAIL_CREDIT_THRESHOLD": "4",
        "MAILRAIL_PIGGYBACK": "off",
        "MAILRAIL_RANKS_PER_NODE": "8",
        "MAILRAIL_CREDITS_PER_PAIR": "3",
        "MAILRAIL_STALL_TIMEOUT": "2.5",
        "MAILRAIL_SLOW_RANK_WARNING": "0.5",
        "MAILRAIL_IDLE_SLEEP_US": "25",
        "MAILRAIL_ATOMICS": "cpu",
        "MAILRAIL_IMPLEMENTATION": "python",
        "MAILRAIL_TRACE": "/tmp/trace-dir",
        "MAILRAIL_ON_ERROR": "raise",
    }
    assert set(environ) == {env_name(k) for k in KNOBS}, "test must cover every knob"
    config = Config.from_env(environ)
    assert config.as_dict() == {
        "datagram_size": 1024,
        "send_pool_slots": 16,
        "recv_pool_slots": 64,
        "max_recvs": 32,
        "flow_control": "rank",
        "credit_threshold": 4,
        "piggyback": False,
        "ranks_per_node": 8,
        "credits_per_pair": 3,
        "stall_timeout": 2.5,
        "slow_rank_warning": 0.5,
        "idle_sleep_us": 25.0,
        "atomics": "cpu",
        "implementation": "python",
        "trace": "/tmp/trace-dir",
        "on_error": "raise",
    }
    assert config.posted_receives == 32


def test_unrelated_and_blank_environment_variables_are_ignored():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = Config.from_env({"MAILRAIL_DATAGRAM_SIZE": "   ", "PATH": "/bin", "MAILRAIL_TEST_TIMEOUT": "9"})
    assert config == Config()


def test_an_unknown_mailrail_variable_warns_naming_the_closest_knob():
    with pytest.warns(ConfigWarning) as caught:
        config = Config.from_env({"MAILRAIL_FLOWCONTROL": "rank", "MAILRAIL_RECV_SLOTS": "2"})
    assert [str(warning.message) for warning in caught] == [
        "unknown environment variable MAILRAIL_FLOWCONTROL is ignored: did you mean MAILRAIL_FLOW_CONTROL?",
        "unknown environment variable MAILRAIL_RECV_SLOTS is ignored: did you mean MAILRAIL_RECV_POOL_SLOTS?",
    ]
    assert config == Config()  # misspelled: nothing taken from them


def test_an_unknown_variable_far_from_every_knob_lists_the_knobs():
    with pytest.warns(ConfigWarning) as caught:
        Config.from_env({"MAILRAIL_ZZZ": "1"})
    assert "MAILRAIL_ZZZ" in str(caught[0].message) and "MAILRAIL_DATAGRAM_SIZE" in str(caught[0].message)


def test_the_non_knob_variables_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Config.from_env({name: "1" for name in NON_KNOB_VARIABLES})
    assert {"MAILRAIL_CLUSTER_USERNS", "MAILRAIL_TEST_IMPLEMENTATION", "MAILRAIL_TEST_TIMEOUT"} <= set(
        NON_KNOB_VARIABLES
    )
    # and those mailrail run sets in every rank's environment
    assert {control.JOB_VARIABLE, failure.FAILURES_VARIABLE, failure.TRACEBACKS_VARIABLE} <= set(NON_KNOB_VARIABLES)


def test_config_warning_can_be_made_an_error_by_the_warnings_filter():
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        with pytest.raises(ConfigWarning):
            Config.from_env({"MAILRAIL_DATAGRAM_SIZ": "64"})


@pytest.mark.parametrize(
    "variable, raw",
    [
        ("MAILRAIL_IDLE_SLEEP_US", "9e15"),
        ("MAILRAIL_IDLE_SLEEP_US", "1e16"),
        ("MAILRAIL_IDLE_SLEEP_US", "1000001"),
        ("MAILRAIL_STALL_TIMEOUT", "1e9"),
        ("MAILRAIL_DATAGRAM_SIZE", "2147483648"),
        ("MAILRAIL_RECV_POOL_SLOTS", "1e9"),
        ("MAILRAIL_RECV_POOL_SLOTS", "99999999999999999999"),
        ("MAILRAIL_SEND_POOL_SLOTS", "2147483648"),
        ("MAILRAIL_MAX_RECVS", "2147483648"),
        ("MAILRAIL_CREDITS_PER_PAIR", "2147483648"),
        ("MAILRAIL_CREDIT_THRESHOLD", "2147483648"),
        ("MAILRAIL_RANKS_PER_NODE", "2147483648"),
    ],
)
def test_every_numeric_knob_has_an_upper_bound(variable, raw):
    with pytest.raises(ConfigError) as info:
        Config.from_env({variable: raw})
    assert variable in str(info.value) and raw in str(info.value)


def test_the_largest_accepted_values_fit_mpi_ints():
    config = Config.from_env({"MAILRAIL_IDLE_SLEEP_US": "1000000", "MAILRAIL_CREDITS_PER_PAIR": str(MPI_INT_MAX)})
    assert config.idle_sleep_us == 1e6 and config.credits_per_pair == MPI_INT_MAX


def test_pools_larger_than_physical_memory_are_refused_naming_the_sizes():
    memory = physical_memory()
    assert memory is not None
    slots = memory // (1 << 30) + 2  # 1 GiB datagrams: one more than the memory holds
    with pytest.raises(ConfigError) as info:
        Config.from_env({"MAILRAIL_DATAGRAM_SIZE": str(1 << 30), "MAILRAIL_RECV_POOL_SLOTS": str(slots)})
    assert f"MAILRAIL_RECV_POOL_SLOTS={slots}" in str(info.value) and str(memory) in str(info.value)


@pytest.mark.parametrize(
    "path, words",
    [
        ("/etc/passwd", ["exists and is not a directory"]),
        ("/nonexistent/dir/x", ["'/nonexistent/dir'", "does not exist"]),
        ("", ["must be a directory path"]),
    ],
)
def test_bad_trace_paths_are_config_errors(path, words):
    with pytest.raises(ConfigError) as info:
        Config.from_env({}, trace=path)
    for word in words:
        assert word in str(info.value)


def test_an_existing_file_and_a_missing_parent_are_refused_and_nothing_is_created(tmp_path):
    existing = tmp_path / "file"
    existing.write_text("x")
    with pytest.raises(ConfigError):
        Config.from_env({"MAILRAIL_TRACE": str(existing)})
    with pytest.raises(ConfigError):
        Config.from_env({"MAILRAIL_TRACE": str(tmp_path / "missing" / "trace")})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_trace_directory_or_a_new_one_in_an_existing_directory_is_accepted(tmp_path):
    assert Config.from_env({"MAILRAIL_TRACE": str(tmp_path)}).trace == str(tmp_path)
    assert Config.from_env({"MAILRAIL_TRACE": str(tmp_path / "new")}).trace == str(tmp_path / "new")
    assert not (tmp_path / "new").exists()  # made by the first rail that records, not by the check


def test_environment_values_are_stripped_and_case_insensitive():
    config = Config.from_env(
        {"MAILRAIL_SEND_POOL_SLOTS": " 12 ", "MAILRAIL_FLOW_CONTROL": " Node ", "MAILRAIL_ATOMICS": "MPI"}
    )
    assert config.send_pool_slots == 12
    assert config.flow_control == "node"
    assert config.atomics == "mpi"


def test_keyword_overrides_environment_and_says_so():
    environ = {"MAILRAIL_DATAGRAM_SIZE": "100", "MAILRAIL_FLOW_CONTROL": "rank", "MAILRAIL_PIGGYBACK": "1"}
    with pytest.warns(ConfigWarning) as caught:
        config = Config.from_env(environ, datagram_size=200, flow_control="node", piggyback=False)
    assert config.datagram_size == 200
    assert config.flow_control == "node"
    assert config.piggyback is False
    assert sorted(str(w.message) for w in caught) == [
        "datagram_size=200 (a keyword) overrides MAILRAIL_DATAGRAM_SIZE='100' from the environment",
        "flow_control='node' (a keyword) overrides MAILRAIL_FLOW_CONTROL='rank' from the environment",
        "piggyback=False (a keyword) overrides MAILRAIL_PIGGYBACK='1' from the environment",
    ]


def test_a_keyword_that_agrees_with_the_environment_says_nothing():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = Config.from_env(
            {"MAILRAIL_DATAGRAM_SIZE": "4096", "MAILRAIL_PIGGYBACK": "on"}, datagram_size=4096, piggyback=1
        )
    assert config.datagram_size == 4096 and config.piggyback is True


def test_keyword_wins_even_when_the_environment_value_is_invalid():
    with pytest.warns(ConfigWarning, match="datagram_size=64 .* overrides MAILRAIL_DATAGRAM_SIZE='garbage'"):
        config = Config.from_env({"MAILRAIL_DATAGRAM_SIZE": "garbage"}, datagram_size=64)
    assert config.datagram_size == 64


def test_keyword_none_falls_back_to_the_environment():
    assert Config.from_env({"MAILRAIL_SEND_POOL_SLOTS": "9"}, send_pool_slots=None).send_pool_slots == 9


def test_keywords_alone_without_environment():
    config = Config.from_env({}, recv_pool_slots=8, max_recvs=8, stall_timeout=1, trace="out")
    assert (config.recv_pool_slots, config.max_recvs, config.stall_timeout, config.trace) == (8, 8, 1.0, "out")


def test_integral_float_keyword_is_accepted_as_int():
    config = Config.from_env({}, datagram_size=512.0)
    assert config.datagram_size == 512 and type(config.datagram_size) is int


def test_unknown_keyword_raises_config_error_naming_it_and_listing_valid_options():
    with pytest.raises(ConfigError) as info:
        Config.from_env({}, datagram_sise=10)
    message = str(info.value)
    assert "datagram_sise" in message
    assert "datagram_size" in message  # the list of valid options


# -- invalid values ------------------------------------------------------------

INVALID_ENV = [
    ("MAILRAIL_DATAGRAM_SIZE", "abc"),
    ("MAILRAIL_DATAGRAM_SIZE", "0"),
    ("MAILRAIL_DATAGRAM_SIZE", "-5"),
    ("MAILRAIL_DATAGRAM_SIZE", "1.5"),
    ("MAILRAIL_SEND_POOL_SLOTS", "0"),
    ("MAILRAIL_SEND_POOL_SLOTS", "many"),
    ("MAILRAIL_RECV_POOL_SLOTS", "-1"),
    ("MAILRAIL_MAX_RECVS", "0"),
    ("MAILRAIL_FLOW_CONTROL", "credit"),
    ("MAILRAIL_CREDIT_THRESHOLD", "0"),
    ("MAILRAIL_PIGGYBACK", "maybe"),
    ("MAILRAIL_PIGGYBACK", "2"),
    ("MAILRAIL_RANKS_PER_NODE", "0"),
    ("MAILRAIL_CREDITS_PER_PAIR", "-3"),
    ("MAILRAIL_STALL_TIMEOUT", "-1"),
    ("MAILRAIL_STALL_TIMEOUT", "nan"),
    ("MAILRAIL_STALL_TIMEOUT", "inf"),
    ("MAILRAIL_STALL_TIMEOUT", "soon"),
    ("MAILRAIL_IDLE_SLEEP_US", "-0.5"),
    ("MAILRAIL_ATOMICS", "gpu"),
    ("MAILRAIL_IMPLEMENTATION", "turbo"),
]


@pytest.mark.parametrize("variable, bad", INVALID_ENV)
def test_invalid_environment_value_raises_config_error_naming_variable_and_value(variable, bad):
    with pytest.raises(ConfigError) as info:
        Config.from_env({variable: bad})
    message = str(info.value)
    assert variable in message
    assert bad in message


INVALID_KEYWORDS = [
    ("datagram_size", 0),
    ("datagram_size", -1),
    ("datagram_size", 1.5),
    ("datagram_size", True),
    ("datagram_size", "lots"),
    ("send_pool_slots", [4]),
    ("recv_pool_slots", 0),
    ("max_recvs", -2),
    ("flow_control", "credits"),
    ("credit_threshold", 0),
    ("piggyback", "sometimes"),
    ("ranks_per_node", 0),
    ("credits_per_pair", 0),
    ("stall_timeout", -0.1),
    ("stall_timeout", float("inf")),
    ("slow_rank_warning", -1),
    ("slow_rank_warning", "soon"),
    ("idle_sleep_us", "slow"),
    ("atomics", "quantum"),
    ("implementation", "jit"),
]


@pytest.mark.parametrize("keyword, bad", INVALID_KEYWORDS)
def test_invalid_keyword_value_raises_config_error_naming_variable_and_value(keyword, bad):
    with pytest.raises(ConfigError) as info:
        Config.from_env({}, **{keyword: bad})
    message = str(info.value)
    assert env_name(keyword) in message
    assert keyword in message
    assert str(bad) in message


def test_non_path_trace_keyword_raises_config_error_naming_variable_and_value():
    # Regression: _path used to let os.fspath's bare TypeError escape.
    with pytest.raises(ConfigError) as info:
        Config.from_env({}, trace=12345)
    assert "MAILRAIL_TRACE" in str(info.value)
    assert "12345" in str(info.value)


def test_bytes_trace_path_is_decoded_to_str():
    assert Config.from_env({}, trace=b"trace-dir").trace == "trace-dir"


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        Config.from_env({"MAILRAIL_DATAGRAM_SIZE": "x"})


def test_max_recvs_above_recv_pool_slots_is_rejected_naming_both():
    with pytest.raises(ConfigError) as info:
        Config.from_env({"MAILRAIL_RECV_POOL_SLOTS": "16", "MAILRAIL_MAX_RECVS": "17"})
    message = str(info.value)
    assert "MAILRAIL_MAX_RECVS=17" in message
    assert "MAILRAIL_RECV_POOL_SLOTS=16" in message


def test_max_recvs_above_default_pool_via_keyword_is_rejected():
    with pytest.raises(ConfigError, match="MAILRAIL_MAX_RECVS=513"):
        Config.from_env({}, max_recvs=513)


def test_max_recvs_equal_to_recv_pool_slots_is_accepted():
    config = Config.from_env({"MAILRAIL_RECV_POOL_SLOTS": "16", "MAILRAIL_MAX_RECVS": "16"})
    assert config.posted_receives == 16


def test_max_recvs_below_recv_pool_slots_sets_posted_receives():
    assert Config.from_env({}, recv_pool_slots=16, max_recvs=4).posted_receives == 4


@pytest.mark.parametrize("raw", ["1", "on", "true", "yes", "ON", " True ", "Yes"])
def test_bool_parsing_true_spellings(raw):
    assert Config.from_env({"MAILRAIL_PIGGYBACK": raw}).piggyback is True


@pytest.mark.parametrize("raw", ["0", "off", "false", "no", "OFF", " False ", "No"])
def test_bool_parsing_false_spellings(raw):
    assert Config.from_env({"MAILRAIL_PIGGYBACK": raw}).piggyback is False


@pytest.mark.parametrize("value, expected", [(True, True), (False, False), ("off", False), (1, True), (0, False)])
def test_bool_keyword_accepts_bools_and_spellings(value, expected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert Config.from_env({"MAILRAIL_PIGGYBACK": "on"}, piggyback=value).piggyback is expected
    assert len(caught) == (0 if expected else 1)  # the variable says otherwise only when the keyword is false


@pytest.mark.parametrize("mode", list(MODE_NAMES))
def test_flow_control_accepts_each_documented_mode(mode):
    assert Config.from_env({"MAILRAIL_FLOW_CONTROL": mode}).flow_control == mode
    assert Config.from_env({}, flow_control=mode).flow_control == mode


def test_flow_control_error_lists_the_valid_choices():
    with pytest.raises(ConfigError) as info:
        Config.from_env({"MAILRAIL_FLOW_CONTROL": "ranks"})
    message = str(info.value)
    for mode in MODE_NAMES:
        assert mode in message


@pytest.mark.parametrize("mode", ["auto", "cpu", "mpi"])
def test_atomics_accepts_each_documented_mode(mode):
    assert Config.from_env({"MAILRAIL_ATOMICS": mode}).atomics == mode


@pytest.mark.parametrize("mode", ["auto", "compiled", "python"])
def test_implementation_accepts_each_documented_mode(mode):
    assert Config.from_env({"MAILRAIL_IMPLEMENTATION": mode}).implementation == mode
    assert Config.from_env({}, implementation=mode).implementation == mode


def test_config_is_immutable():
    config = Config.from_env({})
    with pytest.raises(AttributeError):
        config.datagram_size = 1  # type: ignore[misc]


def test_every_knob_is_a_keyword_only_parameter_of_mailrail_with_its_type():
    from mailrail.rail import MailRail

    parameters = inspect.signature(MailRail.__init__).parameters
    keyword_only = {name: p for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
    fields = dataclasses.fields(Config)
    # The knobs, in their order, each typed as its knob.
    assert list(keyword_only) == [field.name for field in fields]
    types = {field.name: field.type for field in fields}
    for name, parameter in keyword_only.items():
        knob_type = types[name]
        optional = knob_type if knob_type.endswith("| None") else f"{knob_type} | None"
        assert parameter.annotation == optional, name
        assert parameter.default is None  # None: left to MAILRAIL_* and the default


def test_the_benchmark_flags_are_the_knobs_with_their_documented_meaning():
    parser = argparse.ArgumentParser()
    add_rail_arguments(parser)
    flags = {action.dest: action for action in parser._actions if action.dest != "help"}
    assert sorted(flags) == sorted(knob.name for knob in knobs() if knob.flag)
    for knob in knobs():
        if knob.flag:
            assert flags[knob.name].option_strings == ["--" + knob.name.replace("_", "-")]
            assert knob.help.replace("`", "") in flags[knob.name].help and knob.variable in flags[knob.name].help


def test_every_knob_has_a_meaning_and_a_documented_default():
    for knob in knobs():
        assert knob.help and knob.default_text and knob.variable == env_name(knob.name)
        assert "\n" not in knob.help and "|" not in knob.help  # one line, and a table cell
