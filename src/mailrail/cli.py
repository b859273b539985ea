"""The ``mailrail`` command (also ``python -m mailrail``): every benchmark and tool."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import ClusterError

# command path -> module providing add_arguments(parser) and run(args) -> int (or "module:verb", see below)
COMMANDS = {
    ("run",): (
        "mailrail.launch",
        "run a mailrail command or -- any program under mpiexec, here or on a virtual "
        "cluster (mailrail run -n 16 --cluster 4 bench adversarial)",
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
        "the main job: adversarial incast under none, rank and node flow control, side by side",
    ),
    ("sweep",): ("mailrail.bench.sweep", "weak scaling and victim sweep of the three modes (JSON + plots)"),
    ("replay",): (
        "mailrail.trace.replay",
        "replay a recorded trace over MailRail, verify delivery (mailrail run -n RANKS replay TRACE_DIR)",
    ),
    ("trace", "stats"): ("mailrail.trace.stats", "a trace's ranks, phases, messages, byte matrix and heatmap"),
    ("trace", "generate"): ("mailrail.trace.generate", "write a synthetic binary trace: uniform, zipf or rmat"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """A parser for the command *argv* names, importing only that command's module.

    Every command's parser is built on demand, so a broken or slow module never
    takes the other commands down, and ``mailrail compare`` does not load MPI.
    """
    for path in sorted(COMMANDS, key=len, reverse=True):
        if tuple(argv[: len(path)]) == path:
            module_name, help_text = COMMANDS[path]
            parser = argparse.ArgumentParser(prog="mailrail " + " ".join(path), description=help_text)
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
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    if parser.get_default("run") is None:
        args = parser.parse_args(argv)  # --help, or not a command: say which exist
        parser.error(f"unknown command {' '.join(args.command)!r}")
    parser.set_defaults(mailrail_argv=argv)  # for a command that runs itself again (in a user namespace)
    args = parser.parse_args(argv[parser.get_default("consumed") :])
    try:
        return int(args.run(args) or 0)
    except ClusterError as error:
        print(f"{parser.prog}: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
