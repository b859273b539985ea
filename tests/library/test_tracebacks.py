"""A failing rank's traceback as ``mailrail run`` shows it, without MPI: trimmed to the user's frames and the library's
frame that raised (mailrail.tracebacks), the first failing rank's alone on the terminal, every rank's in full in
the log the summary names (mailrail_tools.jobs.report)."""

from __future__ import annotations

import os
import re
import sys
import tempfile
import traceback

import numpy as np
import pytest

from mailrail import failure
from mailrail.containers import HashPartitioner
from mailrail.tracebacks import LOG_TOKEN, brief_traceback, is_library_frame, with_log
from mailrail_tools.jobs import rank_runner
from mailrail_tools.jobs.report import FailureReport

pytestmark = pytest.mark.jobs

#: A library of the test's own: its frames are the library's by their module's name.
FAKE_LIBRARY = """
def relay(callback, *args):
    return forward(callback, *args)

def forward(callback, *args):
    return callback(*args)

def check(value):
    return refuse(value)

def refuse(value):
    raise KeyError(f"no such key: {value}")
"""
library: dict = {"__name__": "mailrail.fake_library"}
exec(compile(FAKE_LIBRARY, "/elsewhere/fake_library.py", "exec"), library)


def raised(call, *args) -> BaseException:
    try:
        call(*args)
    except BaseException as error:  # (the test's own calls: whatever they raise is returned)
        return error
    raise AssertionError("nothing was raised")


def frame_lines(text: str) -> list[str]:
    """The lines that stand for frames: ``File ...`` and ``... N library frames ...``."""
    return [line.strip() for line in text.splitlines() if line.lstrip().startswith(("File ", "... "))]


def full(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


# -- what is left out -------------------------------------------------------------------------------------------


def user_outer(keys):
    user_inner(keys)


def user_inner(keys):
    HashPartitioner(4).owner(keys)  # raises in mailrail.containers.partition, three calls down


def test_the_user_s_frames_stay_the_library_s_go_but_the_one_that_raised():
    error = raised(user_outer, np.zeros(2, dtype=[("a", "u8"), ("o", object)]))
    brief = brief_traceback(error)
    frames = frame_lines(brief)
    assert [line.rsplit(", in ", 1)[1] for line in frames if line.startswith("File ")] == [
        "raised",
        "user_outer",
        "user_inner",
        "as_keys",  # the library's frame that raised, under the marker for the two before it
    ]
    assert frames[3] == f"... 2 library frames (full traceback in {LOG_TOKEN})"
    assert "containers/partition.py" in frames[4]
    assert "in owner" not in brief and "in key_words" not in brief  # (both are in the full traceback)
    assert "in owner" in full(error) and "in key_words" in full(error)
    # the exception's type and message, intact
    assert brief.splitlines()[-1] == full(error).splitlines()[-1]
    assert brief.splitlines()[-1].startswith("TypeError: keys must have a fixed-size dtype")


def test_an_error_raised_in_user_code_shows_no_library_frame():
    def own_check():
        raise ValueError("the user's own")

    error = raised(library["relay"], own_check)
    brief = brief_traceback(error)
    assert frame_lines(brief)[1] == f"... 2 library frames (full traceback in {LOG_TOKEN})"  # relay, forward
    assert frame_lines(brief)[2].endswith("in own_check")
    assert "fake_library" not in brief
    assert brief.splitlines()[-1] == "ValueError: the user's own"

    error = raised(own_check)
    assert brief_traceback(error) == full(error)  # nothing to leave out: the traceback as Python prints it


def test_a_user_callback_between_library_frames_keeps_its_frames():
    def callback(value):
        library["check"](value)

    error = raised(library["relay"], callback, 7)
    frames = frame_lines(brief_traceback(error))
    assert [line.split(", in ")[-1] if line.startswith("File ") else line for line in frames] == [
        "raised",
        f"... 2 library frames (full traceback in {LOG_TOKEN})",
        "callback",
        f"... 1 library frame (full traceback in {LOG_TOKEN})",
        "refuse",
    ]


def test_chained_exceptions_keep_their_user_frames_each_trimmed():
    def handle():
        try:
            library["check"]("k")
        except KeyError as error:
            raise RuntimeError("while handling") from error

    def during():
        try:
            library["check"]("k")
        except KeyError:
            raise RuntimeError("during")  # noqa: B904 (an implicit chain, on purpose)

    for program, joint in [
        (handle, "The above exception was the direct cause of the following exception:"),
        (during, "During handling of the above exception, another exception occurred:"),
    ]:
        brief = brief_traceback(raised(program))
        first, second = brief.split(joint)
        assert (
            "in check" not in brief
            and "in refuse" in first
            and f"1 library frame (full traceback in {LOG_TOKEN})" in first
        )
        assert frame_lines(first)[0].endswith(f"in {program.__name__}")  # (where it was caught)
        assert first.strip().endswith("KeyError: 'no such key: k'")
        assert [line.split(", in ")[-1] for line in frame_lines(second)] == ["raised", program.__name__]
        assert second.strip().endswith(f"RuntimeError: {'while handling' if program is handle else 'during'}")


def test_an_exception_group_s_exceptions_are_trimmed_too():
    def both():
        errors = [raised(library["check"], key) for key in ("a", "b")]
        raise ExceptionGroup("two", errors)

    brief = brief_traceback(raised(both))
    assert brief.count(f"... 1 library frame (full traceback in {LOG_TOKEN})") == 2
    assert brief.count("in refuse") == 2 and "in check" not in brief
    assert "KeyError: 'no such key: a'" in brief and "KeyError: 'no such key: b'" in brief


def test_what_is_the_library_s():
    def frame_of(globals_: dict, filename: str):
        return eval(compile("__import__('sys')._getframe()", filename, "eval"), globals_)

    assert is_library_frame(frame_of({"__name__": "mailrail.rail"}, "rail.py"))
    assert is_library_frame(frame_of({"__name__": "mpi4py.MPI"}, "src/mpi4py/MPI.src/Comm.pyx"))
    assert is_library_frame(frame_of({"__name__": "runpy"}, "<frozen runpy>"))
    # python -m mailrail_tools, and the rank runner: __main__, named by their file
    assert is_library_frame(frame_of({"__name__": "__main__"}, failure.__file__))
    assert is_library_frame(frame_of({"__name__": "__main__"}, rank_runner.__file__))
    assert is_library_frame(frame_of({"__name__": "mailrail_tools.jobs.rank_runner"}, rank_runner.__file__))
    # a package installed beside the library is the user's (site-packages holds both)
    beside = os.path.join(os.path.dirname(os.path.dirname(failure.__file__)), "numpy", "core.py")
    assert not is_library_frame(frame_of({"__name__": "__main__"}, beside))
    assert not is_library_frame(frame_of({"__name__": "__main__"}, "/home/user/prog.py"))
    assert not is_library_frame(frame_of({"__name__": "mailrailway"}, "/home/user/mailrailway.py"))
    assert not is_library_frame(frame_of({"__name__": "json.decoder"}, "/usr/lib/python3/json/decoder.py"))
    assert not is_library_frame(sys._getframe())  # this test's


def test_the_log_is_named_where_the_token_stands():
    brief = brief_traceback(raised(user_outer, np.zeros(2, dtype=[("a", "u8"), ("o", object)])))
    assert "(full traceback in /tmp/x.log)" in with_log(brief, "/tmp/x.log") and LOG_TOKEN not in with_log(brief, "x")


# -- what mailrail run shows and keeps ---------------------------------------------------------------------------


@pytest.fixture
def report(tmp_path, monkeypatch):
    """A FailureReport whose ranks are this process (each record_failure as the rank ``rank`` says)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # (the log, where the test looks)
    with FailureReport(3) as made:
        for name, value in made.environment.items():
            monkeypatch.setenv(name, value)
        yield made


class Comm:
    """A communicator in which this process is rank *rank* (read only if this process started MPI)."""

    def __init__(self, rank: int) -> None:
        self.rank = rank

    def Get_rank(self) -> int:  # (MPI's name)
        return self.rank


def record_as(monkeypatch, rank: int, error: BaseException | None, exit_code: int = 1) -> None:
    monkeypatch.setenv("PMI_RANK", str(rank))  # (without MPI: the rank its launcher would have given it)
    for other in ("OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        monkeypatch.delenv(other, raising=False)
    assert failure.record_failure(error, exit_code, Comm(rank))


def summary_and_log(stderr: str) -> tuple[str, str, str]:
    found = re.fullmatch(r"(.*) \[(.*): (\S+); -v shows them\]", stderr.splitlines()[-1])
    assert found, stderr
    with open(found.group(3), encoding="utf-8") as log:
        return found.group(1), found.group(2), log.read()


def test_the_first_rank_to_record_its_failure_is_shown_trimmed_and_every_one_is_logged(report, monkeypatch, capsys):
    keys = np.zeros(2, dtype=[("a", "u8"), ("o", object)])
    record_as(monkeypatch, 2, raised(user_outer, keys))  # first, though not the lowest rank
    record_as(monkeypatch, 1, raised(library["check"], "k"))
    report.say("mailrail run", 1)
    err = capsys.readouterr().err
    summary, kept, log = summary_and_log(err)
    assert summary.startswith("mailrail run: the job failed with exit status 1: rank 2 raised TypeError: keys must")
    assert summary.endswith("; rank 1 raised KeyError: 'no such key: k'")
    assert kept == "the 2 tracebacks in full"
    shown = err.splitlines()[:-1]
    path = re.search(r"\[(.*): (\S+); -v shows them\]$", err.splitlines()[-1]).group(2)
    assert err.count("Traceback") == 1 and all(re.match(r"\[rank 2 on \S+\] ", line) for line in shown), err
    assert f"  ... 2 library frames (full traceback in {path})" in err
    # the log: both tracebacks, in full, in the order the ranks recorded them, labelled as a bare mpiexec shows them
    assert log.index("[rank 2 on ") < log.index("[rank 1 on ") and log.count("Traceback") == 2
    assert "library frames" not in log and "in key_words" in log and "in check" in log


def test_no_traceback_is_shown_when_the_first_failure_has_none_or_is_every_rank_s(report, monkeypatch, capsys):
    record_as(monkeypatch, 0, None, exit_code=3)  # sys.exit(3): the first failure, without a traceback
    record_as(monkeypatch, 1, raised(library["check"], "k"))  # (then, say, a rank the abort caught mid-call)
    report.say("mailrail run", 3)
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    assert summary_and_log(err)[1] == "the traceback in full"


def test_an_error_every_rank_raises_alike_is_one_line(report, monkeypatch, capsys):
    from mailrail.errors import ConfigError

    def bad_knob():
        raise ConfigError("bad knob")

    for rank in range(3):
        record_as(monkeypatch, rank, raised(library["relay"], bad_knob))
    report.say("mailrail run", 1)
    err = capsys.readouterr().err
    assert err.splitlines()[0].startswith("mailrail run: the job failed with exit status 1: every rank (3) raised")
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_verbose_leaves_the_tracebacks_to_the_ranks(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with FailureReport(2, verbose=True) as verbose:
        assert failure.TRACEBACKS_VARIABLE not in verbose.environment  # the ranks print theirs, in full
        for name, value in verbose.environment.items():
            monkeypatch.setenv(name, value)
        record_as(monkeypatch, 1, raised(library["check"], "k"))
        verbose.say("mailrail run", 1)
    err = capsys.readouterr().err
    assert err == "mailrail run: the job failed with exit status 1: rank 1 raised KeyError: 'no such key: k'\n"
    assert not list(tmp_path.glob("mailrail-run-*.log"))
