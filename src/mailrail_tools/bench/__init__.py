"""Benchmarks: each module provides ``add_arguments(parser)`` and ``run(args)`` for the CLI.

They start MPI as the library does, through :mod:`mailrail._mpi` (``from .._mpi import MPI``), never by
importing mpi4py themselves: a command run without a launcher (a singleton, ``mailrail bench stream``) then
leaves no shared-memory segment nor session directory behind (import-linter checks it).
"""
