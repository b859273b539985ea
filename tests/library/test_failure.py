"""mailrail.failure without MPI: the exit status of a failure, its rank-prefixed traceback, and the wait
for the launcher to take a failing rank's output before the job is aborted."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time

import pytest

from mailrail import failure
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


def test_unread_bytes_counts_what_a_pipe_holds_until_its_reader_takes_it():
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, b"x" * 300)
        assert failure._unread_bytes(write_end) == 300
        os.read(read_end, 100)
        assert failure._unread_bytes(write_end) == 200
        os.read(read_end, 200)
        assert failure._unread_bytes(write_end) == 0
    finally:
        os.close(read_end)
        os.close(write_end)


def test_unread_bytes_is_zero_for_a_file_and_counts_a_socket_not_yet_taken():
    with tempfile.TemporaryFile() as file:
        file.write(b"y" * 50)
        file.flush()
        assert failure._unread_bytes(file.fileno()) == 0
    ours, launcher = socket.socketpair()
    with ours, launcher:
        ours.sendall(b"z" * 64)
        # a Unix socket counts the buffer memory its unread bytes hold, so more than 64
        assert failure._unread_bytes(ours.fileno()) >= 64
        launcher.recv(64)
        assert failure._unread_bytes(ours.fileno()) == 0


@pytest.mark.parametrize("reader_takes_it", [True, False])
def test_the_wait_ends_when_the_launcher_has_read_the_output_or_at_its_bound(monkeypatch, reader_takes_it):
    read_end, write_end = os.pipe()
    saved = os.dup(2)
    os.dup2(write_end, 2)
    try:
        os.write(2, b"traceback\n")
        if reader_takes_it:
            threading.Timer(0.2, os.read, (read_end, 100)).start()
        started = time.monotonic()
        failure._wait_for_output_taken(bound=30.0 if reader_takes_it else 0.3)
        waited = time.monotonic() - started
        still_there = failure._unread_bytes(2)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    os.close(read_end)
    os.close(write_end)
    if reader_takes_it:
        assert still_there == 0  # it returned because the output was taken ...
        assert waited < 30.0  # ... not because the bound ran out
    else:
        assert still_there == len(b"traceback\n")
        assert waited >= 0.3
