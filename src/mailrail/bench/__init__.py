"""Benchmarks: each module provides ``add_arguments(parser)`` and ``run(args)`` for the CLI."""
