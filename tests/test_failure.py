"""mailrail.failure without MPI: the exit status of a failure and its rank-prefixed traceback."""

from __future__ import annotations

import pytest

from mailrail.failure import exit_code_of, format_failure


class Terminated(BaseException):
    def __init__(self, signum: int) -> None:
        self.signum = signum


@pytest.mark.parametrize(
    "error, code",
    [
        (SystemExit(0), 0),
        (SystemExit(None), 0),
        (SystemExit(3), 3),
        (SystemExit("message"), 1),
        (KeyboardInterrupt(), 130),
        (Terminated(15), 143),
        (Terminated(1), 129),
        (RuntimeError("x"), 1),
    ],
)
def test_exit_code_of(error, code):
    assert exit_code_of(error) == code


def test_every_line_of_the_traceback_carries_the_label():
    try:
        raise ValueError("bad value 7")
    except ValueError as error:
        text = format_failure(error, "rank 3 on host")
    lines = text.splitlines()
    assert lines[0] == "[rank 3 on host] Traceback (most recent call last):"
    assert lines[-1] == "[rank 3 on host] ValueError: bad value 7"
    assert all(line.startswith("[rank 3 on host] ") for line in lines)
