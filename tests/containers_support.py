"""What the container tests share (``pythonpath = tests`` in pyproject.toml): the flow-control runs of their
mpiexec jobs and those jobs' environment, the test programs loaded as modules for mailrail.testing's World,
the World of tiny pools and its Hypothesis seeds, and the checks of work left pending at finalize()."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import mpirun, program_path
from mailrail.testing import World

#: Batch sizes of the jobs by their number of ranks: 4 ranks on a small machine take turns.
SCALE = {2: "1", 4: "0.5"}

#: ``seed, mode, ranks, pools, transport`` of the mpiexec tests of Set and Bag (and, but for the last, Map):
#: every flow-control mode, tiny pools but in the smoke run, the Python transport once.
MPI_RUNS = [
    pytest.param(1, "none", 2, False, None, marks=pytest.mark.smoke),
    (2, "rank", 4, True, None),
    (3, "node", 4, True, None),
    (4, "adaptive", 4, True, None),
    (5, "adaptive", 2, True, "python"),
]


def tiny_pools(datagram_size: int = 256) -> dict[str, str]:
    """Small datagrams and pools: many datagrams (and calls) per batch, constant backpressure."""
    return {
        "MAILRAIL_DATAGRAM_SIZE": str(datagram_size),
        "MAILRAIL_SEND_POOL_SLOTS": "2",
        "MAILRAIL_RECV_POOL_SLOTS": "6",
    }


def job_env(mode: str, pools: bool, transport: str | None, datagram_size: int = 256) -> dict[str, str]:
    """A container job's variables: flow-control *mode* with 2 ranks a node, tiny pools if *pools*
    (:func:`tiny_pools` of *datagram_size*), and *transport* if one is given."""
    env = {
        "MAILRAIL_FLOW_CONTROL": mode,
        "MAILRAIL_RANKS_PER_NODE": "2",
        **(tiny_pools(datagram_size) if pools else {}),
    }
    if transport:
        env["MAILRAIL_IMPLEMENTATION"] = transport
    return env


def scenario_job(
    program: str, ranks: int, mode: str, pools: bool, transport: str | None, *args: str, datagram_size: int = 256
) -> dict:
    """tests/programs/PROGRAM with *args* under mpiexec on *ranks* ranks (:func:`job_env`): every check of every
    rank passed and, with tiny pools, backpressure happened.  Returns rank 0's ``RESULT``."""
    result = mpirun(ranks, program, *args, env=job_env(mode, pools, transport, datagram_size))
    assert result["failures"] == []
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    return result


def assert_staged_job(program: str) -> None:
    """tests/programs/PROGRAM ``--staged`` on 2 ranks: its checks passed and its work left pending at finalize()
    was reported (:func:`assert_staged`)."""
    result = mpirun(2, program, "--seed", "6", "--staged")
    assert result["failures"] == []
    assert_staged(result)


def load_program(name: str) -> ModuleType:
    """The test program *name* (tests/programs/NAME.py) as a module: its functions run on mailrail.testing's
    ranks; its main() is not run.  It is registered in sys.modules, so functions sent by reference (visits,
    calls) are found there."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, program_path(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def tiny_world(size: int, seed: int, datagram_size: int = 256) -> World:
    """An in-memory World of *size* ranks with small datagrams and pools: backpressure, as under mpiexec."""
    return World(size, seed=seed, datagram_size=datagram_size, send_pool_slots=2, recv_pool_slots=4)


def over_seeds(max_examples: int, **strategies: Any) -> Callable[[Callable], Callable]:
    """A Hypothesis test over ``seed`` (0..2**16) and World ``size`` (1..4), and *strategies*, with no deadline
    (a World runs its ranks in one process: some examples are slow)."""

    def decorate(test: Callable) -> Callable:
        chosen = given(seed=st.integers(0, 2**16), size=st.integers(1, 4), **strategies)(test)
        return settings(max_examples=max_examples, deadline=None)(chosen)

    return decorate


def scenario_in_memory(program: str, size: int, seed: int, *args: Any, datagram_size: int = 256) -> list[dict]:
    """*program*'s ``scenario(rail, seed, *args)`` in a :func:`tiny_world`: no check failed on any rank.  Returns
    each rank's result."""
    results = tiny_world(size, seed, datagram_size).run(load_program(program).scenario, seed, *args)
    assert [failure for result in results for failure in result["failures"]] == []
    return results


def assert_reported_staged(reports: list[dict]) -> None:
    """Each rank's *reports* of work left pending at finalize() without a barrier: counted as staged (no more
    than was pending) and warned about once."""
    for report in reports:
        assert 0 < report["report"]["staged"] <= report["pending"], report
        assert len(report["warnings"]) == 1 and "staged" in report["warnings"][0]


def assert_staged(result: dict) -> None:
    """A job's work left pending at finalize() without a barrier: reported as staged on each rank (``staged``,
    see :func:`assert_reported_staged`); an error if strict (``strict``)."""
    assert_reported_staged(result["staged"])
    for strict in result["strict"]:
        assert "left staged" in strict["error"], strict


def assert_staged_in_memory(program: ModuleType) -> None:
    """*program*'s ``staged(rail, strict)`` in a World: the pending work counted as staged (3 ranks); an error
    if strict (2 ranks)."""
    for result in World(3, seed=1).run(program.staged, False):
        assert 0 < result["report"]["staged"] <= result["pending"]
    for result in World(2, seed=2).run(program.staged, True):
        assert "left staged" in result["error"]


def local_arrays(table: Any, *dtypes: Any) -> tuple:
    """A container's ``local()`` table back as numpy arrays, one per column, of these *dtypes*."""
    import numpy as np

    from mailrail.containers.keys import numpy_column

    return tuple(numpy_column(table.column(i), np.dtype(dtype)) for i, dtype in enumerate(dtypes))
