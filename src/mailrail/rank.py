"""The rank runner: what every rank of ``mailrail run -- PROGRAM`` runs (``python -m mailrail.rank``).

* Every rank dies with its parent (``prterun``, ``prted`` or Hydra's proxy): ``PR_SET_PDEATHSIG``
  is set before the program runs, so a launcher that is SIGKILLed takes its ranks along
  (see :mod:`mailrail.jobcontrol`).
* A Python program (``python3 -u prog.py ARGS``, ``-m MODULE ARGS``, ``-c CODE ARGS``) runs in
  this interpreter as ``python -m mpi4py`` runs it, with one difference: an exception that
  escapes it ends the whole job through :func:`mailrail.failure.abort_job` (its traceback once,
  each line prefixed by the rank, then ``MPI_Abort``), so no peer is left waiting in a collective.
  ``sys.exit(N)`` with N other than 0 ends the job the same way, without a traceback.
* Any other program is exec'd (after the parent-death signal is set).

Usage: ``python [OPTIONS] -m mailrail.rank (SCRIPT | -m MODULE | -c CODE | - | --exec PROGRAM) [ARGS]``.
"""

from __future__ import annotations

import os
import runpy
import sys
import types
from collections.abc import Sequence
from typing import NoReturn

from .failure import abort_job, end_job, exit_code_of, rank_label
from .jobcontrol import die_with_parent

#: The interpreter options ``mailrail run -- python OPTIONS ...`` keeps (they take no value ...)
PYTHON_FLAGS = set("bBdEiIOPqsSuvx")
#: ... or the next word, or the rest of this one, as their value.
PYTHON_VALUE_OPTIONS = ("-X", "-W")
#: The names ``mailrail run -- NAME`` reads as "this Python" (a path is left alone: the user chose it).
PYTHON_NAMES = ("python", "python3", f"python3.{sys.version_info.minor}")
#: The frames a failing program's traceback starts with that are the runner's, not the program's.
RUNNER_FILES = (__file__, runpy.__file__, "<frozen runpy>")


def split_python_argv(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``python``'s arguments split into its interpreter options and what it runs (``-m M ...`` etc.)."""
    args = list(args)
    options: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        flags = len(word) - len(word.lstrip("-")) == 1 and len(word) > 1
        letters = 1
        while flags and letters < len(word) and word[letters] in PYTHON_FLAGS:
            letters += 1
        if word in PYTHON_VALUE_OPTIONS:
            options += args[index : index + 2]
            index += 2
        elif word.startswith(PYTHON_VALUE_OPTIONS) or (flags and letters == len(word)):
            options.append(word)
            index += 1
        elif flags and letters > 1 and word[letters] in "cm":  # -uc CODE, -um MODULE
            options.append(word[:letters])
            args[index] = "-" + word[letters:]
            break
        else:
            break
    return options, args[index:]


def rank_argv(program: Sequence[str]) -> list[str]:
    """How a rank runs *program* (``mailrail run -- PROGRAM``): ``python`` is this interpreter, under the runner."""
    if program and program[0] in PYTHON_NAMES:
        options, target = split_python_argv(program[1:])
        return [sys.executable, *options, "-m", "mailrail.rank", *(target or ["-"])]
    return [sys.executable, "-m", "mailrail.rank", "--exec", *program]


def run_python(target: Sequence[str]) -> None:
    """Run ``SCRIPT ARGS`` | ``-m MODULE ARGS`` | ``-c CODE ARGS`` | ``- ARGS`` as ``python`` would, as ``__main__``."""
    first, rest = target[0], list(target[1:])
    if first.startswith("-m"):
        module = first[2:] or rest.pop(0)
        sys.argv = [module, *rest]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif first.startswith("-c") or first == "-":
        code = sys.stdin.read() if first == "-" else (first[2:] or rest.pop(0))
        sys.argv = ["-c" if first != "-" else "-", *rest]
        sys.path[0] = ""
        main = types.ModuleType("__main__")  # the program's own __main__, as python -c gives it
        sys.modules["__main__"] = main
        exec(compile(code, "<string>", "exec"), vars(main))
    else:
        sys.argv = [first, *rest]
        sys.path[0] = os.path.dirname(os.path.abspath(first))
        runpy.run_path(first, run_name="__main__")


def end_job_on(error: BaseException) -> NoReturn:
    """A rank's program failed: end the job (traceback once unless it is a plain ``sys.exit``)."""
    if isinstance(error, SystemExit):
        if error.code is not None and not isinstance(error.code, int):
            sys.stderr.write(f"[{rank_label()}] {error.code}\n")
        end_job(exit_code_of(error))
    abort_job(_without_runner_frames(error), exit_code=exit_code_of(error))


def _without_runner_frames(error: BaseException) -> BaseException:
    """*error* with the runner's and runpy's frames dropped from its traceback: the user's own frames show."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in RUNNER_FILES:
        tb = tb.tb_next
    return error.with_traceback(tb)


def main(argv: Sequence[str]) -> int:
    if not argv or argv[0] == "--exec" and len(argv) < 2:
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    die_with_parent()
    if argv[0] == "--exec":
        try:
            os.execvp(argv[1], list(argv[1:]))
        except OSError as error:
            sys.stderr.write(f"[{rank_label()}] mailrail run: cannot run {argv[1]!r}: {error.strerror}\n")
            return 127
    try:
        run_python(argv)
    except SystemExit as error:
        if exit_code_of(error) != 0:
            end_job_on(error)
    except BaseException as error:
        end_job_on(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
