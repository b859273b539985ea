"""``mailrail run -n N [--cluster N] COMMAND...``: a mailrail command or any program under mpiexec.

Which program the ranks run is decided by the first word after ``mailrail run``'s own flags: ``--``
starts a program (``-- python app.py``); a mailrail command's first word (``bench``, ``compare``, the
first words of :data:`mailrail_tools.cli.COMMANDS`) starts that mailrail command; any other word starts a
program too (``-n 2 python -c pass``, as mpiexec users type it).  A program whose name is a mailrail
command's first word needs the ``--``.

Part of the command layer: it checks the launched command's flags with the dispatcher's own parser
(:func:`mailrail_tools.cli.parse_command`), runs the job through the job runner (:mod:`mailrail_tools.jobs`),
or on a virtual cluster (:mod:`mailrail_tools.cluster`), telling the cluster which ranks are victims
(from ``--victim-ranks``, or ``bench adversarial``'s own flags).  Nothing below imports this module.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Sequence

from mailrail.errors import ClusterError

from ..bench.adversarial import victims_of_command
from ..cluster.job_on_cluster import run_and_report
from ..cluster.options import ClusterChoice, add_cluster_arguments, cluster_spec, node_flags_given, parse_ranks
from ..cluster.privileges import rerun_without_root
from ..flags import float_in, int_in
from ..jobs.job import Here, InAllocation, Job, run_job
from ..jobs.rank_runner import command_argv, rank_argv
from ..jobs.report import FailureReport
from ..jobs.which_mpi import LAUNCHERS, LaunchError, default_launcher, launch_settings, mpi_origin, require_mpi4py
from . import COMMANDS, parse_command

#: Ranks of a job when neither -n nor a Slurm allocation says.
DEFAULT_RANKS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # -np: how mpiexec users type it (mpiexec -np 4)
    parser.add_argument(
        "-n",
        "-np",
        "--ranks",
        type=int_in(1),
        default=None,
        help=f"MPI ranks (default: the allocation's SLURM_NTASKS under srun, else {DEFAULT_RANKS})",
    )
    parser.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=None,
        help="what starts the ranks (default: srun inside a Slurm allocation, SLURM_JOB_ID set, else mpiexec; "
        "on a virtual cluster mpiexec, or srun on one made with --scheduler slurm)",
    )
    parser.add_argument(
        "--timeout", type=float_in(1e-3), default=None, help="end the job (every rank) after this many seconds"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="say every MPI variable mailrail sets for the job (else how many); show every failing rank's traceback "
        "in full and the MPI's messages where they come (else the first failing rank's traceback, trimmed to your "
        "frames, and a log of the rest)",
    )
    parser.add_argument(
        "--tag-output",
        action="store_true",
        help="start every line the ranks print (stdout and stderr) with its rank: '[rank 3] ' "
        "(their lines arrive whole either way)",
    )
    add_cluster_arguments(parser, victims=True)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="a mailrail command and its arguments (bench stream --messages 1000), or any program (python app.py; "
        "-- before it when its name is a mailrail command's; python is the interpreter running mailrail)",
    )


def launched_program(command: Sequence[str]) -> list[str] | None:
    """The program every rank runs when *command* names one (the words after ``--``, or *command* itself
    when its first word is no mailrail command's); None when *command* is a mailrail command."""
    if command and command[0] == "--":
        return list(command[1:])
    if command and command[0] in {path[0] for path in COMMANDS}:
        return None
    return list(command)


#: Python's options that take the next word as their value.
_PYTHON_VALUE_OPTIONS = {"-W", "-X"}


def program_problem(program: Sequence[str]) -> str | None:
    """Why *program* cannot start on any rank (a missing script or executable), checked before launch, or
    None.  ``python`` is the interpreter running mailrail; its script is its first word that is no option
    (``-c`` and ``-m`` name no file)."""
    if not program:
        return "name the program to run after --"
    name = program[0]
    if name in ("python", "python3"):
        words = iter(program[1:])
        for word in words:
            if word in ("-c", "-m", "-"):
                return None
            if word in _PYTHON_VALUE_OPTIONS:
                next(words, None)
                continue
            if word.startswith("-"):
                continue
            if not os.path.isfile(word):
                return f"python: can't open file {word!r}: no such file"
            return None
        return None
    if os.sep in name:
        if not (os.path.isfile(name) and os.access(name, os.X_OK)):
            return f"{name}: no such executable file"
        return None
    if shutil.which(name) is None:
        return f"{name}: command not found (neither a mailrail command nor a program on PATH)"
    return None


def _missing_program(program: Sequence[str] | None) -> bool:
    """Say in one line that *program* cannot start (before any rank is launched), and return True."""
    problem = None if program is None else program_problem(program)
    if problem:
        print(f"mailrail run: {problem}; nothing was started", file=sys.stderr)
    return problem is not None


def program_argv(command: Sequence[str], *, tag_output: bool = False) -> list[str]:
    """What every rank runs: a program, or a mailrail command run with this Python, under the rank runner
    (:mod:`mailrail_tools.jobs.rank_runner`: its output reaches the launcher in whole lines; *tag_output*: each starting
    with ``[rank N] ``)."""
    program = launched_program(command)
    if program is not None:
        return rank_argv(program, tag_output=tag_output)
    return command_argv(command, tag_output=tag_output)


def check_command_arguments(command: Sequence[str]) -> None:
    """Parse a mailrail command's arguments here, before any rank starts: a bad flag is one line and
    exit 2 from the launcher, not one line per rank (argparse exits on the error)."""
    parse_command(list(command))


def run(args: argparse.Namespace) -> int:
    """``mailrail run -n N [--cluster N] COMMAND...``: mpiexec with this machine's settings."""
    if not args.command or args.command == ["--"]:
        print(
            "mailrail run: name a mailrail command (mailrail run -n 2 bench stream) or a program "
            "(mailrail run -n 2 python app.py)",
            file=sys.stderr,
        )
        return 2
    launched = launched_program(args.command)
    if launched is None:
        check_command_arguments(args.command)
    program = program_argv(args.command, tag_output=args.tag_output)
    require_mpi4py(program)
    choice = ClusterChoice.parse(args.cluster)
    if args.launcher is None:  # a virtual cluster is built here, never inside an allocation
        args.launcher = "mpiexec" if choice.kind != "off" else default_launcher()
    if args.ranks is None:
        allocated = os.environ.get("SLURM_NTASKS") if args.launcher == "srun" and choice.kind == "off" else None
        args.ranks = allocated_ranks(allocated) if allocated else DEFAULT_RANKS
    if choice.kind == "nodes" and args.launcher == "srun":
        raise ClusterError(
            f"--launcher srun runs on a running Slurm cluster (mailrail cluster up --scheduler slurm, then "
            f"--cluster up[:NAME]), not on one built for this job (--cluster {args.cluster})"
        )
    if choice.kind != "off":
        if _missing_program(launched):
            return 2
        return run_on_cluster(args, choice, program)
    loose = node_flags_given(args)
    if loose:
        print(f"mailrail run: {', '.join(loose)} describe a virtual cluster: add --cluster N", file=sys.stderr)
        return 2
    where = InAllocation() if args.launcher == "srun" else Here()
    job = Job(args.ranks, program, where, timeout=args.timeout)
    job.launch_argv  # noqa: B018  (its launcher found, or a LaunchError, before anything is said)
    if _missing_program(launched):
        return 2
    if args.launcher == "mpiexec":
        warning = oversubscription_warning(args.ranks, available_cores())
        if warning:
            print(f"mailrail run: {warning}", file=sys.stderr, flush=True)
    say_settings(verbose=args.verbose)
    with FailureReport(args.ranks, verbose=args.verbose) as report:
        ran = run_job(job, report=report)
        if ran.timed_out:
            report.show_first_traceback()
            print(f"mailrail run: killed after {args.timeout} s{report.kept()}", file=sys.stderr)
            return 124
        report.say("mailrail run", ran.returncode)
    return ran.returncode


#: Ranks per core above which ``mailrail run`` warns before it starts a job on this machine: past it
#: start-up alone outgrows a typical --timeout (measured: docs, troubleshooting, "Many ranks on few
#: cores").
OVERSUBSCRIPTION_WARN_RATIO = 16


def available_cores() -> int:
    """The cores this process may run on (its affinity mask: a container's or a cgroup's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def oversubscription_warning(ranks: int, cores: int) -> str | None:
    """One line when *ranks* on *cores* is more than :data:`OVERSUBSCRIPTION_WARN_RATIO` ranks per core."""
    if ranks <= OVERSUBSCRIPTION_WARN_RATIO * cores:
        return None
    return (
        f"{ranks} ranks on {cores} core(s) ({ranks / cores:.0f} per core): every rank starts Python and MPI on "
        f"these cores, so start-up alone may take a minute or more (a MailRail program took 58 s to start and "
        f"finish at 64 per core on 2 cores); give --timeout room for it, or run fewer ranks"
    )


def allocated_ranks(text: str) -> int:
    """The allocation's task count (``SLURM_NTASKS``), the ranks of a job run without -n inside it."""
    if not text.strip().isdigit() or int(text) < 1:
        raise LaunchError(f"SLURM_NTASKS={text!r} is not a task count: give the ranks with -n")
    return int(text)


def say_settings(where: str = "", *, verbose: bool = False) -> None:
    """One short line on standard error: how many MPI variables the job gets from MailRail (each, *verbose*),
    or none and why (standard output stays the program's)."""
    settings = launch_settings(os.environ, mpi_origin())
    text = settings.describe() if verbose else settings.summary()
    print(f"mailrail run: {text}{where}", file=sys.stderr, flush=True)


def run_on_cluster(args: argparse.Namespace, choice: ClusterChoice, program: Sequence[str]) -> int:
    """``mailrail run --cluster``: the victims (whose nodes ``--victim-node-memory`` caps) are
    ``--victim-ranks``, else the ones ``bench adversarial`` picks from its own flags."""
    status = rerun_without_root(args.mailrail_argv)
    if status is not None:
        return status
    victims = parse_ranks(args.victim_ranks)
    if not victims and args.command[:2] == ["bench", "adversarial"]:
        victims = victims_of_command(args.command[2:], args.ranks)
    spec = cluster_spec(args, choice, args.ranks, victims)
    say_settings("; the virtual cluster's launcher adds its network settings", verbose=args.verbose)
    return run_and_report(
        spec,
        args.ranks,
        program,
        running=choice.name,
        timeout=args.timeout,
        launcher=args.launcher,
        verbose=args.verbose,
    )
