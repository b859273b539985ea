"""The MPI's own messages in a job's standard error, told apart from what the ranks wrote (no MPI here).

When a job fails, Open MPI prints boxes of dashes (``MPI_ABORT was invoked ...``, ``prterun noticed that
process rank 1 ... exited on signal 9``), MPICH's Hydra a box of ``=`` (``BAD TERMINATION OF ONE OF YOUR
APPLICATION PROCESSES``) and a few loose lines.  ``mailrail run`` keeps them out of the way: it passes the
ranks' lines on, keeps these (:class:`LauncherMessageFilter`), writes them to a log it names, and says in
its one-line summary which rank ended on which signal (:func:`ended_processes`).  ``mailrail run -v`` shows
them where they came.

Sans-I/O: bytes in, bytes out; the relay thread in :mod:`mailrail_tools.jobs.bounded` does the reading and writing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A line that opens and closes one of Open MPI's boxes (``opal_show_help``: 74 dashes).
_OPEN_MPI_RULE = re.compile(rb"-{74}\s*")
#: A line that opens and closes Hydra's box (MPICH: a row of ``=``).
_HYDRA_RULE = re.compile(rb"={40,}\s*")
#: The lines of a Hydra box between its rules.
_HYDRA_BODY = re.compile(rb"=(\s.*)?")
#: Loose lines of the MPIs' (Open MPI's help aggregation and abort notice, MPICH's abort and Hydra's verdict).
_LOOSE_LINES = re.compile(
    rb"\[[^\]\s]+:\d+\] \d+ more process(es)? ha(s|ve) sent help message .*"
    rb"|\[[^\]\s]+:\d+\] (\*\*\* |\w+:\w+: ).*"  # Open MPI's error handler; a framework's warning (plm:ssh: ...)
    rb"|\[[^\]\s]+:\d+\] \[\[\d+,\d+\],\d+\] .*"  # Open MPI 4's runtime (ORTE_ERROR_LOG: ...)
    rb"|\[(proxy:[\d:]+|mpiexec)@[^\]\s]+\] .*"  # Hydra's proxy and mpiexec
    rb"|\[[^\]\s]+:\d+\] Set MCA parameter \"\w+\" to 0 to see all help / error messages"
    rb"|Abort is in progress\.\.\.hit ctrl-c again to forcibly terminate"
    rb"|(Abort\(\d+\) on node \d+ \(rank \d+ in comm \d+\): )?application called MPI_Abort\(.*"
    rb"|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*"
    rb"|This typically refers to a problem with your application\."
    rb"|Please see the FAQ page for debugging suggestions"
)
#: ``mailrail run --tag-output`` starts a rank's lines so (an MPI's message printed by a rank has it too).
_RANK_TAG = re.compile(rb"\[rank \d+\] ")
#: How the MPIs' loose lines that start with no ``[`` begin.
_LOOSE_STARTS = (
    b"Abort",
    b"application called MPI_Abort(",
    b"YOUR APPLICATION TERMINATED",
    b"This typically refers",
    b"Please see the FAQ",
)


def _may_become_message(partial: bytes) -> bool:
    """Whether the unfinished line *partial* may still turn out to be the MPI's (Hydra writes its prefix and
    its message in separate writes): a rule's characters only, a ``[`` (a prefix of Open MPI's or Hydra's),
    or the start of one of the loose lines."""
    bare = _RANK_TAG.sub(b"", partial, count=1)
    if not bare.strip(b"-= \t\r") or bare.startswith(b"["):
        return True
    return any(start.startswith(bare) or bare.startswith(start) for start in _LOOSE_STARTS)


#: Lines a box may hold before it is taken for a rank's own output after all (a rule a program printed).
MAX_BOX_LINES = 60


class LauncherMessageFilter:
    """Splits one of a job's output streams, fed in pieces, into what to show and the MPI's messages (kept).

    Lines are classified whole: a piece's unfinished line that may still become one of the MPI's waits for
    the rest (Hydra writes its prefix and its message apart), any other is shown at once.  A box's lines wait until its
    closing rule; one that never closes (or outgrows :data:`MAX_BOX_LINES`) was a program's own output and
    is shown.  A blank line just before a box belongs to it (Hydra starts its box with one).
    """

    def __init__(self, messages: list[bytes] | None = None) -> None:
        self.messages: list[bytes] = [] if messages is None else messages
        self._partial = b""
        self._held: list[bytes] = []  # a box being read (its opening rule first), or one blank line
        self._rule: re.Pattern[bytes] | None = None
        self._mid_line = False  # the start of the current line was shown unclassified

    def feed(self, data: bytes) -> bytes:
        """The part of *data* (and of what was held) to show now."""
        shown = b""
        if self._mid_line:  # the rest of a line whose start was shown: shown too
            end = data.find(b"\n") + 1
            if not end:
                return data
            shown, data, self._mid_line = data[:end], data[end:], False
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        shown += b"".join(self._line(line + b"\n") for line in lines)
        if self._partial and self._rule is None and not _may_become_message(self._partial):
            # an unfinished line (a prompt, a progress bar) that cannot be the MPI's: shown now, not held
            shown += self._release() + self._partial
            self._partial, self._mid_line = b"", True
        return shown

    def finish(self) -> bytes:
        """What is left to show once the stream ended (an unclosed box was not one)."""
        shown = self._line(self._partial) if self._partial else b""
        self._partial = b""
        return shown + self._release()

    def for_another_stream(self) -> LauncherMessageFilter:
        """A filter for another stream of the same job, keeping the MPI's messages in the same list."""
        return LauncherMessageFilter(self.messages)

    @property
    def text(self) -> str:
        """The MPI's messages kept so far, as one text."""
        return b"".join(self.messages).decode(errors="replace")

    def _release(self) -> bytes:
        held, self._held, self._rule = b"".join(self._held), [], None
        return held

    def _line(self, line: bytes) -> bytes:
        bare = _RANK_TAG.sub(b"", line, count=1).rstrip(b"\n")
        if self._rule is not None:  # inside a box
            self._held.append(line)
            if self._rule.fullmatch(bare):
                self.messages.append(b"".join(self._held))
                self._held, self._rule = [], None
                return b""
            if (self._rule is _HYDRA_RULE and not _HYDRA_BODY.fullmatch(bare)) or len(self._held) > MAX_BOX_LINES:
                return self._release()
            return b""
        for rule in (_OPEN_MPI_RULE, _HYDRA_RULE):
            if rule.fullmatch(bare):
                self._held.append(line)
                self._rule = rule
                return b""
        shown = self._release()  # a held blank line that no box followed
        if not bare.strip() and line.endswith(b"\n"):
            self._held.append(line)
            return shown
        if _LOOSE_LINES.fullmatch(bare):
            self.messages.append(line)
            return shown
        return shown + line


@dataclass(frozen=True)
class EndedProcess:
    """A process of the job that the launcher reported ended on a signal (or a bare exit code)."""

    host: str
    rank: int | None = None  # (MPICH's Hydra does not say which rank)
    signal: int | None = None
    signal_name: str = ""
    exit_code: int | None = None
    aborted: bool = False  # it called MPI_Abort (Open MPI's error handler does, when a peer is lost)
    reason: str = ""  # what its MPI said before it aborted (a peer on n1 disconnected; Socket closed)


#: Open MPI 4 and 5: ``mpirun``/``prterun noticed that process rank 1 with PID 0 on node vm exited on
#: signal 9 (Killed).`` (the words wrap across the box's lines).
_OPEN_MPI_SIGNAL = re.compile(
    r"noticed that process rank (\d+) with PID \d+ on node (\S+) exited on\s+signal (\d+)(?: \(([^)]*)\))?"
)
#: Hydra: ``PID 7696 RUNNING AT vm`` and ``EXIT CODE: 9`` in its box; the signal in ``... EXIT STRING:
#: Killed (signal 9)`` after it.  (That PID is the first rank's on the host, whichever rank died: not kept.)
#: Open MPI: ``prterun has exited due to process rank 0 with PID 0 on node n0 calling "abort"``, and the box
#: of a rank whose peer went away (``... unexpectedly disconnected ... Local host: n0 ... Peer host: n1``).
_OPEN_MPI_ABORT = re.compile(r"exited due to process rank (\d+) with PID \d+ on node (\S+) calling\s+\"abort\"")
_OPEN_MPI_LOST_PEER = re.compile(r"unexpectedly disconnected\..*?Local host:\s+(\S+).*?Peer host:\s+(\S+)", re.S)
#: Open MPI's error handler, before it aborts: ``[n0:00000] *** An error occurred in Socket closed``.
_OPEN_MPI_ERROR = re.compile(r"\[([^\]\s:]+):\d+\] \*\*\* An error occurred in (.+)")
_HYDRA_PID = re.compile(r"PID \d+ RUNNING AT (\S+)")
_HYDRA_EXIT_CODE = re.compile(r"EXIT CODE: (\d+)")
_HYDRA_EXIT_STRING = re.compile(r"EXIT STRING: (.*?) \(signal (\d+)\)")


def ended_processes(messages: str) -> list[EndedProcess]:
    """The processes the MPI's *messages* (:attr:`LauncherMessageFilter.text`) say ended abnormally."""
    ended = [
        EndedProcess(host=host, rank=int(rank), signal=int(number), signal_name=name or "")
        for rank, host, number, name in _OPEN_MPI_SIGNAL.findall(messages)
    ]
    reasons = {host: what.strip() for host, what in _OPEN_MPI_ERROR.findall(messages)}
    reasons.update({host: f"a peer on {peer} disconnected" for host, peer in _OPEN_MPI_LOST_PEER.findall(messages)})
    ended += [
        EndedProcess(host=host, rank=int(rank), aborted=True, reason=reasons.get(host, ""))
        for rank, host in _OPEN_MPI_ABORT.findall(messages)
    ]
    exit_string = _HYDRA_EXIT_STRING.search(messages)
    for box in re.split(r"\n(?==+\s*\n)", messages):
        found = _HYDRA_PID.search(box)
        code = _HYDRA_EXIT_CODE.search(box)
        if found and code:
            number = int(exit_string.group(2)) if exit_string else None
            ended.append(
                EndedProcess(
                    host=found.group(1),
                    signal=number,
                    signal_name=exit_string.group(1) if exit_string else "",
                    exit_code=int(code.group(1)),
                )
            )
    return ended
