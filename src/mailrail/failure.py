"""Deprecated: moved to :mod:`mailrail.jobs.failure` with the rest of the job runner (:mod:`mailrail.jobs`).

The API reference documented ``mailrail.failure.abort_job`` and ``mailrail.failure.exit_code_of``: this
module still gives them (and the rest of the module's names), and warns (``DeprecationWarning``) when
imported; import ``mailrail.jobs.failure`` instead.
"""

from __future__ import annotations

import warnings

from .jobs.failure import (
    FAILURES_VARIABLE,
    OUTPUT_DRAIN_BOUND,
    PEERS_RECORDED_BOUND,
    SAME_ON_EVERY_RANK,
    abort_job,
    describe_ranks,
    end_job,
    exit_code_of,
    format_failure,
    rank_label,
    read_failures,
    record_failure,
    set_output_forwarder,
    write_all,
)

__all__ = [
    "FAILURES_VARIABLE",
    "OUTPUT_DRAIN_BOUND",
    "PEERS_RECORDED_BOUND",
    "SAME_ON_EVERY_RANK",
    "abort_job",
    "describe_ranks",
    "end_job",
    "exit_code_of",
    "format_failure",
    "rank_label",
    "read_failures",
    "record_failure",
    "set_output_forwarder",
    "write_all",
]

warnings.warn(
    "mailrail.failure is deprecated: import mailrail.jobs.failure (the job runner's package)",
    DeprecationWarning,
    stacklevel=2,
)
