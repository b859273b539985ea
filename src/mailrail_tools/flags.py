"""Range-checked argparse types: a flag out of range is a one-line usage error (exit 2), never a traceback.

``parser.add_argument("--log2-table", type=int_in(1, 40))`` makes ``--log2-table 99`` end with::

    mailrail bench histogram: error: argument --log2-table: must be an integer in 1..40, got '99'

Bounds are inclusive; ``high=None`` means no upper bound.  The check happens while argv is parsed, so
before any MPI work, cluster or result file, and every rank of a job parsing the same argv stops alike.

MailRail's knobs are flags too (:func:`add_rail_arguments`, one ``--flag`` per knob, checked by the
knob's own parser); :func:`rail_options` reads them back as MailRail keyword arguments.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from mailrail.config import KNOBS, Config, Knob, env_name, knobs
from mailrail.errors import ConfigError

# MPI counts, ranks and tags are C ints: a value above this cannot be passed to MPI at all
MPI_INT_MAX = 2**31 - 1
#: The largest seed the commands take (numpy's SeedSequence wants a non-negative int; 63 bits is plenty).
SEED_MAX = 2**63 - 1


def int_in(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` accepting a base-10 integer in ``low..high`` (inclusive)."""
    if high is not None and high < low:
        raise ValueError(f"int_in: empty range {low}..{high}")
    expected = f"an integer in {low}..{high}" if high is not None else f"an integer >= {low}"

    def parse(text: str) -> int:
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    parse.__name__ = f"int_in({low}, {high})"  # argparse names the type with it in some messages
    return parse


def float_in(low: float, high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` accepting a finite number in ``low..high`` (inclusive; NaN and infinities refused)."""
    if high is not None and high < low:
        raise ValueError(f"float_in: empty range {low}..{high}")
    expected = f"a number in {low:g}..{high:g}" if high is not None else f"a number >= {low:g}"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}") from None
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {text!r}")
        return value

    parse.__name__ = f"float_in({low:g}, {high if high is None else format(high, 'g')})"
    return parse


def int_list_in(low: int, high: int | None = None, *, allow_empty: bool = False) -> Callable[[str], list[int]]:
    """An argparse ``type`` for comma-separated integers, each in ``low..high`` (``''`` only if *allow_empty*)."""
    item = int_in(low, high)

    def parse(text: str) -> list[int]:
        words = [word for word in text.split(",") if word.strip()]
        if not words and not allow_empty:
            raise argparse.ArgumentTypeError(f"must be comma-separated integers, got {text!r}")
        values = []
        for word in words:
            try:
                values.append(item(word))
            except argparse.ArgumentTypeError as error:
                raise argparse.ArgumentTypeError(f"each value {error}") from None
        return values

    parse.__name__ = "int_list"
    return parse


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse ``type`` for comma-separated names out of *choices* (duplicates dropped, order kept)."""

    def parse(text: str) -> list[str]:
        names = list(dict.fromkeys(word.strip() for word in text.split(",") if word.strip()))
        unknown = [name for name in names if name not in choices]
        if unknown or not names:
            raise argparse.ArgumentTypeError(f"each must be one of {','.join(choices)}, got {text!r}")
        return names

    parse.__name__ = "choice_list"
    return parse


def usage_error(command: str, message: str, comm: Any = None) -> int:
    """Print ``mailrail COMMAND: error: MESSAGE`` and return exit status 2.

    For what argparse cannot check alone (a flag against the rank count, a missing module).  Every
    rank must reach the same verdict, which it does from the same argv, environment and job shape, so
    every rank returns 2 and the job ends with no rank left waiting in a collective.  With *comm* (MPI
    started) rank 0 alone prints and the ranks then meet in a barrier, so the launcher cannot end the
    job on another rank's exit before the line is out; without it every rank prints its one line.
    """
    if comm is None or comm.Get_rank() == 0:
        # One write: print() writes the text and its newline separately, and the launcher may splice
        # another rank's line in between.
        sys.stderr.write(f"mailrail {command}: error: {message}\n")
        sys.stderr.flush()
    if comm is not None:
        comm.Barrier()
    return 2


def missing_module(module: str, command: str, extra: str, *, purpose: str = "") -> str | None:
    """None if *module* imports, else the one-line reason: ``app cc needs scipy: pip install 'mailrail[apps]'``."""
    try:
        importlib.import_module(module)
    except ImportError:
        top = module.partition(".")[0]
        return f"{command} needs {top}{purpose}: pip install 'mailrail[{extra}]'"
    return None


def agreed_problem(comm: Any, problem: str | None) -> str | None:
    """Collective: the first rank's problem, on every rank, when any rank has one (a rank-local check
    such as memory must not leave the other ranks in the next collective)."""
    problems = [text for text in comm.allgather(problem) if text]
    return problems[0] if problems else None


def one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make *parser*'s usage errors one line (exit status 2) instead of the usage block and the line.

    argparse prints the whole usage block before the error: under ``mpiexec -n 16`` that is 16 copies
    of 20 lines around the one line that matters.  Every rank parses the same argv and fails alike;
    each prints its one line, because MPI has not started, so nothing lets a rank wait for rank 0
    (the launcher ends the job when the first rank exits: a rank that stayed silent for rank 0 to
    speak could leave the job with no message at all).
    """

    def error(message: str) -> NoReturn:
        parser.exit(2, f"{parser.prog}: error: {message} (see {parser.prog} --help)\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


# -- MailRail's knobs as flags ----------------------------------------------------------


def add_rail_arguments(
    parser: argparse.ArgumentParser, *, skip: Sequence[str] = (), defaults: dict[str, Any] | None = None
) -> None:
    """One ``--flag`` per MailRail knob (:func:`mailrail.config.knobs`, with their meanings); unset
    flags fall back to ``MAILRAIL_*`` / defaults.  Each value is checked by its knob's parser as argv
    is parsed (``--datagram-size 0`` is a usage error) and kept as given, for :func:`rail_flags`.

    *defaults*: the command's own defaults, as it gives them to :func:`checked_rail_options` (a value, or a text
    saying how the command computes it); the help then says what the command runs with, beside the library's."""
    group = parser.add_argument_group("MailRail options (override MAILRAIL_* variables)")
    own = defaults or {}
    for knob in flag_knobs():
        if knob.name not in skip:
            default = f"default {knob.default_text}"
            if knob.name in own:
                default = f"this command's default {own[knob.name]}, the library's {knob.default_text}"
            group.add_argument(
                "--" + knob.name.replace("_", "-"),
                dest=knob.name,
                default=None,
                type=_checked_by_knob(knob.name),
                help=f"{knob.help} ({knob.variable}; {default})".replace("`", "").replace("%", "%%"),
            )


def _checked_by_knob(name: str) -> Any:
    parse = KNOBS[name]

    def check(raw: str) -> str:
        try:
            parse("VALUE", raw, None)
        except ConfigError as error:  # "VALUE must be in 1..N, got 0": the flag is named by argparse
            raise argparse.ArgumentTypeError(str(error).removeprefix("VALUE ")) from None
        return raw

    check.__name__ = name
    return check


def checked_rail_options(
    command: str, args: argparse.Namespace, defaults: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Config] | None:
    """:func:`rail_options` and the :class:`~mailrail.config.Config` they make with the ``MAILRAIL_*``
    variables, checked together (say ``--max-recvs`` above ``--recv-pool-slots``, or pools larger than
    memory): None after a one-line usage error, which every rank reaches alike from the same argv and
    environment, before any MPI work."""
    options = rail_options(args, defaults)
    try:
        return options, Config.from_env(warn=False, **options)  # the rail warns, once for the job
    except ConfigError as error:
        usage_error(command, str(error))
        return None


def flag_knobs() -> list[Knob]:
    """The knobs benchmarks take as flags."""
    return [knob for knob in knobs() if knob.flag]


def rail_options(args: argparse.Namespace, defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The MailRail keyword arguments the user set on the command line (validated by Config).

    Only the flags :func:`add_rail_arguments` defines count: a command's own argument that
    happens to share a knob's name (say ``trace``) is not a MailRail option.  *defaults*: a
    command's own defaults, for the knobs set neither by a flag nor by a ``MAILRAIL_*`` variable.
    """
    options = {k: v for k, v in (defaults or {}).items() if not os.environ.get(env_name(k), "").strip()}
    options.update({k.name: getattr(args, k.name) for k in flag_knobs() if getattr(args, k.name, None) is not None})
    return options


def rail_flags(options: dict[str, Any]) -> list[str]:
    """Inverse of :func:`rail_options`: command-line flags for a child benchmark run."""
    flags = []
    for knob, value in options.items():
        if value is not None:
            flags += ["--" + knob.replace("_", "-"), str(value)]
    return flags
