"""What a user reads of a failing rank's traceback: their own frames, and the library's frame that raised.

``mailrail run`` shows the traceback of the first rank to fail trimmed by :func:`brief_traceback`, and keeps
every failing rank's traceback in full in the job's log (:mod:`mailrail_tools.jobs.report`).

A frame is the library's when its code is MailRail's (the ``mailrail`` package, its compiled modules and its
``__main__`` included), mpi4py's, or ``runpy``'s (what runs ``python -m`` and the rank runner's program); every
other frame is the user's, the standard library's included.  The trimmed traceback keeps every user frame and,
of each run of library frames, only the last one when it ends the traceback: the frame where the exception was
raised.  Why that frame rather than the first library frame the user called: the user's last frame already
shows that call (``rail.send(dest, buf, 8)``); the frame that raised shows the check that refused it, and is
where a bug in MailRail itself would show.  Each run left out is one line, ``... N library frames (full
traceback in LOG)``, so nothing is hidden silently; an exception raised in user code shows no library frame.
The exception's type and message, and every exception chained to it (``During handling of the above
exception ...``), are kept, each chained traceback trimmed alike.
"""

from __future__ import annotations

import os
import sys
import traceback
import types
from typing import Any

#: The top-level packages whose frames are the library's (by the module the frame's code belongs to): MailRail and
#: its tools (the rank runner, the command), mpi4py, runpy.
LIBRARY_PACKAGES = ("mailrail", "mailrail_tools", "mpi4py", "runpy")
#: Stands for the job's log in a trimmed traceback: only the job's runner knows where that is (:func:`with_log`).
LOG_TOKEN = "\x00LOG\x00"
#: The line that stands for a run of library frames left out.
LEFT_OUT = "  ... {count} library frame{s} (full traceback in {log})\n"

_MAILRAIL_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
#: The tools' package lies beside the library's, in a checkout (src/) as in an installation (site-packages).
_TOOLS_DIRECTORY = os.path.join(os.path.dirname(_MAILRAIL_DIRECTORY), "mailrail_tools")


def is_library_frame(frame: types.FrameType) -> bool:
    """True when *frame* runs the library's code (MailRail, mpi4py, runpy), False for the user's."""
    module = frame.f_globals.get("__name__")
    if isinstance(module, str) and module.partition(".")[0] in LIBRARY_PACKAGES:
        return True
    # a module run as __main__ (python -m mailrail_tools, the rank runner) is named by its file only
    filename = os.path.abspath(frame.f_code.co_filename)
    return any(filename.startswith(directory + os.sep) for directory in _library_directories())


def _library_directories() -> list[str]:
    directories = [_MAILRAIL_DIRECTORY, _TOOLS_DIRECTORY]
    mpi4py = getattr(sys.modules.get("mpi4py"), "__file__", None)
    if mpi4py:
        directories.append(os.path.dirname(os.path.abspath(mpi4py)))
    return directories


def brief_traceback(error: BaseException) -> str:
    """*error*'s traceback as :func:`traceback.format_exception` writes it, each run of library frames left out
    but for the frame that raised, and said in one line that names the log as :data:`LOG_TOKEN`."""
    summary = traceback.TracebackException(type(error), error, error.__traceback__, compact=True)
    pending: list[tuple[traceback.TracebackException, BaseException]] = [(summary, error)]
    while pending:
        described, raised = pending.pop()
        frames = [frame for frame, _ in traceback.walk_tb(raised.__traceback__)]
        if len(frames) == len(described.stack):  # (not when sys.tracebacklimit cut the stack short)
            described.stack = _trimmed(described.stack, [is_library_frame(frame) for frame in frames])
        chained = [(described.__cause__, raised.__cause__), (described.__context__, raised.__context__)]
        chained += zip(described.exceptions or [], getattr(raised, "exceptions", ()))  # an exception group's
        pending += [(inner, exception) for inner, exception in chained if inner is not None and exception is not None]
    return "".join(summary.format())


def with_log(text: str, log: str) -> str:
    """A :func:`brief_traceback` with the job's log named where it says :data:`LOG_TOKEN`."""
    return text.replace(LOG_TOKEN, log)


class _LeftOut(traceback.FrameSummary):
    """A run of *count* library frames, in place of them (its line number: its place, so that no two are alike:
    :meth:`traceback.StackSummary.format` folds repeated frames)."""

    def __init__(self, count: int, place: int) -> None:
        super().__init__("<library frames>", place, "", lookup_line=False)
        self.count = count


class _TrimmedStack(traceback.StackSummary):
    def format_frame_summary(self, frame_summary: traceback.FrameSummary, **options: Any) -> str:
        if isinstance(frame_summary, _LeftOut):
            count = frame_summary.count
            return LEFT_OUT.format(count=count, s="" if count == 1 else "s", log=LOG_TOKEN)
        return str(super().format_frame_summary(frame_summary, **options))


def _trimmed(stack: traceback.StackSummary, library: list[bool]) -> _TrimmedStack:
    """*stack* with each run of library frames replaced by a :class:`_LeftOut`, the last frame kept."""
    kept: list[traceback.FrameSummary] = []
    start = 0
    while start < len(stack):
        if not library[start]:
            kept.append(stack[start])
            start += 1
            continue
        end = start
        while end < len(stack) and library[end]:
            end += 1
        raised_here = end == len(stack)
        if end - start - raised_here:
            kept.append(_LeftOut(end - start - raised_here, start))
        if raised_here:
            kept.append(stack[end - 1])
        start = end
    return _TrimmedStack(kept)
