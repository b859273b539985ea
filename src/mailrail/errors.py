"""Exception and warning types raised by MailRail.

Every error names the offending value in its message, so a failing job says
what was wrong, not merely that something was.
"""


class MailRailError(Exception):
    """Base class of every error MailRail raises."""


class ConfigError(MailRailError, ValueError):
    """A configuration value (keyword argument or environment variable) is invalid."""


class InvalidDestinationError(MailRailError, ValueError):
    """A destination rank is outside ``0 .. size-1`` of the communicator."""


class MessageSizeError(MailRailError, ValueError):
    """A payload size is negative or larger than the datagram size."""


class BufferOwnershipError(MailRailError):
    """A send buffer was not reserved from this rail, or was already sent."""


class ReleaseError(MailRailError):
    """A message was released twice, or does not belong to this rail."""


class FinalizedError(MailRailError):
    """The rail was used after ``finalize()``."""


class StallError(MailRailError):
    """A wait made no progress for ``MAILRAIL_STALL_TIMEOUT`` seconds; the message says who is missing.

    Raised by ``finalize()`` and ``barrier()`` while ranks never arrive (the report names them on
    rank 0), and, as :class:`CreditStallError`, by deferred sends that get no credit.
    """


class CollectiveMismatchError(MailRailError):
    """Ranks called different collectives of one rail (``CountingSet.total()`` on one, ``finalize()`` on another).

    Raised by the judge, rank 0, as soon as it sees the calls (while it waits in a collective, or when it enters
    one), naming each rank's call as the program wrote it and where; leaving ``with MailRail(...)`` it ends the
    job (``on_error="abort"``).  The in-memory world of :mod:`mailrail.testing` raises it from ``World.run``.
    """


class CreditStallError(StallError):
    """Deferred messages made no progress for ``MAILRAIL_STALL_TIMEOUT`` seconds."""


class ProtocolError(MailRailError):
    """A peer broke the credit protocol (e.g. sent without a credit): a MailRail bug."""


class RemoteError(MailRailError):
    """The function of a :meth:`rail.ask <mailrail.channels.Channels.ask>` raised on the rank that ran it; raised by
    :meth:`Future.result() <mailrail.channels.Future.result>` on the rank that asked.  *rank* is where it ran,
    *kind* the exception's type name, *remote_traceback* its traceback there (also in the message)."""

    def __init__(self, rank: int, kind: str, message: str, remote_traceback: str) -> None:
        super().__init__(
            f"rank {rank} raised {kind}: {message}\n--- the traceback on rank {rank} ---\n{remote_traceback.rstrip()}"
        )
        self.rank, self.kind, self.remote_traceback = rank, kind, remote_traceback


class ConfigWarning(UserWarning):
    """An environment variable looks like a knob but is none (``MAILRAIL_*`` misspelled): it is ignored.

    ``python -W error::mailrail.ConfigWarning`` (or ``PYTHONWARNINGS``) makes it an error.
    """


class SlowRankWarning(UserWarning):
    """A collective has waited ``MAILRAIL_SLOW_RANK_WARNING`` seconds for ranks that have not come: said once per
    collective (by rank 0, naming them and where the others are), and the wait goes on."""


class UndeliveredWarning(UserWarning):
    """``finalize()`` found messages that were never delivered or never released."""


class UndeliveredError(MailRailError):
    """``finalize(strict=True)`` found messages that were never delivered or never released."""


class TraceFormatError(MailRailError, ValueError):
    """A communication trace is corrupt, incomplete, or does not fit the job.

    The message names the file and the byte offset (binary) or line (JSON lines)
    of the offending record, and what was found there.
    """


class InputError(MailRailError):
    """Input that cannot be read as asked (:mod:`mailrail.io`): invalid UTF-8, a row that does not parse or
    convert, a column or a schema that does not fit, a file that cannot be opened or read.

    The message names the file and where in it (a byte offset, a row or a row group), and what to do;
    :attr:`path` and :attr:`where` say the same for a program (None when the error concerns no one place).
    """

    def __init__(self, message: str, *, path: str | None = None, where: str | None = None) -> None:
        super().__init__(message)
        #: The file the error is in (None: no one file).
        self.path = path
        #: Where in it: ``"byte 1234"``, ``"row group 3"`` ... (None: the whole file, or no one place).
        self.where = where


class PathNotFoundError(InputError, FileNotFoundError):
    """A path given to a reader of :mod:`mailrail.io` names nothing: no such file, or a directory or a glob
    pattern without a file to read."""


class SkippedRowsWarning(UserWarning):
    """A reader asked to skip bad rows (``on_bad_lines="skip"``) skipped some: how many, and where the first was."""


class ClusterError(MailRailError):
    """A virtual cluster cannot be built, used or removed as asked (bad option, missing privilege or tool).

    The message names the option or the step and the value or the command's own error.
    """


def report_undelivered(where: str, report: dict[str, int], strict: bool) -> None:
    """Say what a finalize() found undelivered (*report*: its counts): a warning, or raise if *strict*.

    One text for every rail (MailRail's and ``mailrail.testing``'s), naming each count.
    """
    if not any(report.values()):
        return
    text = (
        f"{where}: {report['deferred']} deferred message(s) never sent, {report['unreleased']} received "
        f"message(s) never released, {report['unreceived']} arrived message(s) never returned by receive(), "
        f"{report['reserved']} reserved send buffer(s) never sent, {report['staged']} record(s) and call(s) left "
        f"staged in the rail's channels and containers, {report['unanswered']} ask(s) never answered; call "
        f"barrier() (quiescence) before finalize()"
    )
    if strict:
        raise UndeliveredError(text)
    import warnings

    warnings.warn(text, UndeliveredWarning, stacklevel=3)


def nested_barrier_error() -> MailRailError:
    """The error of ``barrier()`` called from inside a barrier handler (every rail's)."""
    return MailRailError(
        "barrier() called from inside a barrier() handler: a handler may send messages (the running "
        "barrier waits for them too), but not start another barrier"
    )
