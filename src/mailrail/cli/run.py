"""``mailrail run -n N [--cluster N] COMMAND...``: a mailrail command or any program under mpiexec.

Part of the command layer: it checks the launched command's flags with the dispatcher's own parser
(:func:`mailrail.cli.parse_command`), runs the job through the job runner (:mod:`mailrail.launch`),
or on a virtual cluster (:mod:`mailrail.cluster`), telling the cluster which ranks are victims
(from ``--victim-ranks``, or ``bench adversarial``'s own flags).  Nothing below imports this module.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence

from ..bench.adversarial import victims_of_command
from ..cluster.jobs import run_job
from ..cluster.options import ClusterChoice, add_cluster_arguments, cluster_spec, node_flags_given, parse_ranks
from ..cluster.privileges import rerun_without_root
from ..launch import launch_settings, mpi_environment, mpi_origin, mpiexec_argv, require_mpi4py, run_bounded
from ..rank import rank_argv
from ..tools.flags import float_in, int_in
from . import parse_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--ranks", type=int_in(1), default=2, help="MPI ranks (default: %(default)s)")
    parser.add_argument(
        "--timeout", type=float_in(1e-3), default=None, help="end the job (every rank) after this many seconds"
    )
    add_cluster_arguments(parser, victims=True)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="a mailrail command and its arguments (bench stream --messages 1000), "
        "or -- and any program (-- python app.py; python is the interpreter running mailrail)",
    )


def program_argv(command: Sequence[str]) -> list[str]:
    """What every rank runs: ``-- PROGRAM ARGS`` under the rank runner (:mod:`mailrail.rank`), else a
    mailrail command run with this Python."""
    if command and command[0] == "--":
        return rank_argv(command[1:])
    return [sys.executable, "-m", "mailrail", *command]


def check_command_arguments(command: Sequence[str]) -> None:
    """Parse a mailrail command's arguments here, before any rank starts: a bad flag is one line and
    exit 2 from the launcher, not one line per rank (argparse exits on the error)."""
    parse_command(list(command))


def run(args: argparse.Namespace) -> int:
    """``mailrail run -n N [--cluster N] COMMAND...``: mpiexec with this machine's settings."""
    if not args.command or args.command == ["--"]:
        print(
            "mailrail run: name a mailrail command (mailrail run -n 2 bench stream) or a program after -- "
            "(mailrail run -n 2 -- python app.py)",
            file=sys.stderr,
        )
        return 2
    if args.command[0] != "--":
        check_command_arguments(args.command)
    program = program_argv(args.command)
    require_mpi4py(program)
    choice = ClusterChoice.parse(args.cluster)
    if choice.kind != "off":
        return run_on_cluster(args, choice, program)
    loose = node_flags_given(args)
    if loose:
        print(f"mailrail run: {', '.join(loose)} describe a virtual cluster: add --cluster N", file=sys.stderr)
        return 2
    argv = mpiexec_argv(args.ranks, program)
    say_settings()
    try:
        return run_bounded(argv, timeout=args.timeout, env=mpi_environment()).returncode
    except subprocess.TimeoutExpired:
        print(f"mailrail run: killed after {args.timeout} s", file=sys.stderr)
        return 124


def say_settings(where: str = "") -> None:
    """One line on standard error: the MPI variables the job gets from MailRail, or none and why
    (standard output stays the program's)."""
    print(f"mailrail run: {launch_settings(os.environ, mpi_origin()).describe()}{where}", file=sys.stderr, flush=True)


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
    say_settings("; the virtual cluster's launcher adds its network settings")
    return run_job(spec, args.ranks, program, running=choice.name, timeout=args.timeout)
