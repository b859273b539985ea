"""The ``mailrail`` command (also ``python -m mailrail``): every benchmark and tool."""

from __future__ import annotations

import argparse
import importlib
import sys

# command path -> module providing add_arguments(parser) and run(args) -> int
COMMANDS = {
    ("run",): ("mailrail.launch", "run a mailrail command under mpiexec on this machine (mailrail run -n 4 bench stream)"),
    ("bench", "stream"): ("mailrail.bench.stream", "message rate and bandwidth vs raw mpi4py (mpiexec -n 2+)"),
    ("bench", "atomics"): ("mailrail.bench.atomics", "node credit pool: CPU vs MPI atomics under contention"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mailrail", description=__doc__)
    groups = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    nested: dict[str, argparse._SubParsersAction] = {}
    for path, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        if len(path) == 1:
            sub = groups.add_parser(path[0], help=help_text, description=help_text)
        else:
            if path[0] not in nested:
                group = groups.add_parser(path[0], help=f"{path[0]} commands")
                nested[path[0]] = group.add_subparsers(dest="subcommand", required=True, metavar="NAME")
            sub = nested[path[0]].add_parser(path[1], help=help_text, description=help_text)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
