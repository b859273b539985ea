"""Collective readers and writers of files: every rank calls them alike, each line or row reaches one rank.

This package's core is sans-I/O: :mod:`mailrail.io.plan` (who reads what) and :mod:`mailrail.io.lines` (lines
out of byte ranges, decoded into Arrow strings).
"""

__all__: list[str] = []
