"""MailRail configuration: environment variables, overridden by keyword arguments.

Each knob has one environment variable (``MAILRAIL_<NAME>``) and one keyword
argument (``<name>``).  Values are validated once, at construction, and a bad
value raises :class:`~mailrail.errors.ConfigError` naming the variable and the
value.  The fields of :class:`Config` are the single source of every knob: their
metadata (see :func:`knob`) gives the parser, the default as documented, the
meaning, from which the benchmarks' flags and the
documentation's table are made.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from .errors import ConfigError, ConfigWarning

#: The flow_control knob's values: the names of the modes in their table, in its order (flow/modes.py checks
#: that they agree when it is imported).
FLOW_CONTROL_MODES = ("none", "rank", "node", "adaptive")
ATOMICS_MODES = ("auto", "cpu", "mpi")
IMPLEMENTATIONS = ("auto", "compiled", "python")
ON_ERROR_MODES = ("abort", "raise")
#: The largest count MPI takes (counts, tags and ranks are C ``int``).
MPI_INT_MAX = 2**31 - 1
#: Longest idle sleep (1 s: a longer one only adds latency) and stall timeout (a day) accepted.
IDLE_SLEEP_US_MAX = 1_000_000.0
STALL_TIMEOUT_MAX = 86_400.0
#: ``MAILRAIL_*`` variables the project reads that are not knobs: no "unknown variable" warning for them.
NON_KNOB_VARIABLES = (
    "MAILRAIL_CLUSTER_USERNS",  # the virtual cluster: user namespaces instead of root
    "MAILRAIL_JOB_DIRS",  # mailrail_tools.jobs.control: marks the processes of a job (set in every rank's environment)
    "MAILRAIL_FAILURES",  # mailrail.failure: where a rank under mailrail run records why it failed
    "MAILRAIL_FAILURE_TRACEBACKS",  # mailrail.failure: mailrail run shows the ranks' tracebacks, not they
    "MAILRAIL_TEST_IMPLEMENTATION",  # the test suite: the implementation of jobs whose test does not choose one
    "MAILRAIL_TEST_TIMEOUT",  # the test suite: seconds before a hung job is killed
    "MAILRAIL_TEST_MPI",  # the test suite: the MPI its environment must run (wheel, site-openmpi, site-mpich)
    "MAILRAIL_FUZZ_EXAMPLES",  # the test suite: Hypothesis examples of the trace fuzzer
)
#: Where Open MPI, PMIx launchers, MPICH's Hydra and Slurm put a process's rank in COMM_WORLD.
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def launcher_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """The rank the launcher gave this process (*environ*, default its environment), or None outside one."""
    for name in _RANK_VARIABLES:
        value = (os.environ if environ is None else environ).get(name, "")
        if value.isdigit():
            return int(value)
    return None


_TRUE = {"1", "on", "true", "yes"}
_FALSE = {"0", "off", "false", "no"}

#: A knob's parser: ``parse(variable, raw, keyword)`` -> the value, or :class:`ConfigError`.
Parser = Callable[[str, Any, "str | None"], Any]


def env_name(knob: str) -> str:
    return "MAILRAIL_" + knob.upper()


def _where(variable: str, keyword: str | None) -> str:
    return f"{keyword}= (keyword for {variable})" if keyword else variable


def _int(minimum: int, maximum: int = MPI_INT_MAX) -> Parser:
    def parse(variable: str, raw: Any, keyword: str | None) -> int:
        if isinstance(raw, bool):
            raise ConfigError(f"{_where(variable, keyword)} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).strip(), 0) if isinstance(raw, str) else int(raw)
            if not isinstance(raw, str) and value != raw:
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"{_where(variable, keyword)} must be an integer, got {raw!r}") from None
        if not minimum <= value <= maximum:
            raise ConfigError(f"{_where(variable, keyword)} must be in {minimum}..{maximum}, got {value}")
        return value

    return parse


def _float(minimum: float, maximum: float) -> Parser:
    def parse(variable: str, raw: Any, keyword: str | None) -> float:
        if isinstance(raw, bool):
            raise ConfigError(f"{_where(variable, keyword)} must be a number, got {raw!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{_where(variable, keyword)} must be a number, got {raw!r}") from None
        if not minimum <= value <= maximum:  # NaN fails too
            raise ConfigError(f"{_where(variable, keyword)} must be a number in {minimum:g}..{maximum:g}, got {raw!r}")
        return value

    return parse


def _choice(choices: tuple[str, ...]) -> Parser:
    def parse(variable: str, raw: Any, keyword: str | None) -> str:
        value = str(raw).strip().lower()
        if value not in choices:
            raise ConfigError(f"{_where(variable, keyword)} must be one of {', '.join(choices)}; got {raw!r}")
        return value

    return parse


def _bool(variable: str, raw: Any, keyword: str | None) -> bool:
    if isinstance(raw, bool):
        return raw
    value = str(raw).strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{_where(variable, keyword)} must be on/off (1/0, true/false), got {raw!r}")


def _path(variable: str, raw: Any, keyword: str | None) -> str:
    """A directory that exists, or that can be made in an existing directory (nothing else is created)."""
    try:
        path = os.fspath(raw)
    except TypeError:
        raise ConfigError(f"{_where(variable, keyword)} must be a directory path, got {raw!r}") from None
    path = path.decode() if isinstance(path, bytes) else path
    where = _where(variable, keyword)
    if path.strip() == "":
        raise ConfigError(f"{where} must be a directory path, got {raw!r}")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(f"{where}={path!r} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ConfigError(f"{where}={path!r} is a directory this process cannot write to")
        return path
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ConfigError(f"{where}={path!r}: its parent directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"{where}={path!r}: its parent directory {parent!r} is not writable by this process")
    return path


def knob(
    default: Any,
    parse: Parser,
    help: str,
    *,
    shown: str | None = None,
    flag: bool = True,
) -> Any:
    """A :class:`Config` field: its *default*, its parser and its meaning (*help*, one line).

    *shown*: the default as the documentation states it, when the value alone would not say it
    (``None`` meaning "derived", say); *flag*: whether benchmarks take it as a ``--flag``.
    """
    text = shown if shown is not None else (f"`{default}`" if isinstance(default, str) else str(default))
    metadata = {"parse": parse, "help": help, "shown": text, "flag": flag}
    return dataclasses.field(default=default, metadata=metadata)


#: The pools' memory a rank gets by default: 256 receive and 128 send slots of the default 32 KiB datagrams.
RECV_POOL_BYTES = 8 << 20
SEND_POOL_BYTES = 4 << 20
#: The default slot counts' bounds, whatever the datagram size: at least the default datagram's, at most the paper's
#: pools of 4 KiB datagrams.  Small datagrams need slots more than bytes: a stream of 4 KiB datagrams is held back
#: by the sends it may have in flight (the performance page, "The defaults a user gets").
RECV_POOL_SLOTS_BOUNDS = (256, 512)
SEND_POOL_SLOTS_BOUNDS = (128, 256)


def default_pool_slots(datagram_size: int) -> tuple[int, int]:
    """The send and receive slots a rank gets for *datagram_size* when it sets neither: as many as
    :data:`SEND_POOL_BYTES` and :data:`RECV_POOL_BYTES` hold, within their bounds."""
    size = max(1, datagram_size)
    send = min(max(SEND_POOL_BYTES // size, SEND_POOL_SLOTS_BOUNDS[0]), SEND_POOL_SLOTS_BOUNDS[1])
    recv = min(max(RECV_POOL_BYTES // size, RECV_POOL_SLOTS_BOUNDS[0]), RECV_POOL_SLOTS_BOUNDS[1])
    return send, recv


@dataclasses.dataclass(frozen=True)
class Config:
    """Every MailRail knob, validated (:meth:`from_env` reads them; :func:`knobs` describes them)."""

    datagram_size: int = knob(32768, _int(1), "bytes per message slot: the largest payload")
    send_pool_slots: int = knob(
        None,
        _int(1),
        "send buffers per rank: held by the application, in flight and deferred",
        shown="128 (4 MiB of the default datagrams; smaller ones get up to 256)",
    )
    recv_pool_slots: int = knob(
        None,
        _int(1),
        "receive slots per rank; the credit budget of every credit mode",
        shown="256 (8 MiB of the default datagrams; smaller ones get up to 512)",
    )
    max_recvs: int | None = knob(
        None, _int(1), "receives kept posted (the other slots wait, unposted)", shown="all receive slots"
    )
    flow_control: str = knob(
        "none",
        _choice(FLOW_CONTROL_MODES),
        "`none` (unconstrained), `rank`, `node` or `adaptive` (credits lent on request)",
    )
    credit_threshold: int = knob(
        2,
        _int(1),
        "return credits once `credits_per_pair / THRESHOLD` were consumed (adaptive: `credits held / THRESHOLD`)",
    )
    piggyback: bool = knob(
        True, _bool, "rank mode: carry owed credits in the tag of payloads going that way", shown="on"
    )
    ranks_per_node: int | None = knob(
        None, _int(1), "virtual nodes: group K consecutive ranks into a node", shown="real nodes"
    )
    credits_per_pair: int | None = knob(
        None,
        _int(1),
        "credits per (sender rank or node, receiver rank) instead of the derived number; adaptive: the most "
        "credits one grant carries (derived: receive slots / 8)",
        shown="derived",
    )
    stall_timeout: float = knob(
        0.0,
        _float(0.0, STALL_TIMEOUT_MAX),
        "raise `CreditStallError` after S seconds of deferred sends without progress (0: never)",
        shown="0 (off)",
    )
    slow_rank_warning: float = knob(
        60.0,
        _float(0.0, STALL_TIMEOUT_MAX),
        "after S seconds in a collective, rank 0 warns once which ranks it waits for and where the others are, "
        "and waits on (0: never)",
        shown="60",
    )
    idle_sleep_us: float = knob(
        0.0,
        _float(0.0, IDLE_SLEEP_US_MAX),
        "after 4 empty `receive()` calls: 0 yields the core to a rank "
        "that has work; > 0 sleeps this many microseconds instead "
        "(frees the core for other programs, adds latency)",
        shown="0",
    )
    atomics: str = knob(
        "auto",
        _choice(ATOMICS_MODES),
        "node credit pool updates: `cpu` (compiled helper), `mpi` (RMA, Python transport), `auto`",
    )
    implementation: str = knob(
        "auto",
        _choice(IMPLEMENTATIONS),
        "the implementation of the protocol and its transport: `compiled` (Cython), `python`, or `auto` "
        "(compiled when built)",
        flag=False,
    )
    trace: str | None = knob(
        None, _path, "directory: record this rank's sends as a YGM-format binary trace", shown="unset", flag=False
    )
    on_error: str = knob(
        "abort",
        _choice(ON_ERROR_MODES),
        "an exception leaving `with MailRail(...)`: `abort` ends the job (`MPI_Abort`), "
        "`raise` frees what is local and re-raises",
        flag=False,
    )

    def __post_init__(self) -> None:
        derived = default_pool_slots(self.datagram_size)  # (pools left unset: sized for the datagram size)
        for name, slots in zip(("send_pool_slots", "recv_pool_slots"), derived, strict=True):
            if getattr(self, name) is None:
                object.__setattr__(self, name, slots)

    @property
    def posted_receives(self) -> int:
        return self.recv_pool_slots if self.max_recvs is None else self.max_recvs

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *, warn: bool = True, **overrides: Any) -> Config:
        r"""Read ``MAILRAIL_*`` from *environ* (default ``os.environ``); keywords win (``None`` is unset).

        ``warn=False`` keeps its :class:`~mailrail.errors.ConfigWarning`\ s to itself: for a tool checking
        options on every rank before the rail it builds says them, once for the job."""
        if not warn:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConfigWarning)
                return cls.from_env(environ, **overrides)
        environ = os.environ if environ is None else environ
        unknown = set(overrides) - set(KNOBS)
        if unknown:
            raise ConfigError(
                f"unknown MailRail option(s): {', '.join(sorted(unknown))}; valid options: {', '.join(KNOBS)}"
            )
        warn_unknown_variables(environ)
        values: dict[str, Any] = {}
        for name in KNOBS:
            found = _read_knob(name, environ, overrides)
            if found:
                values[name] = found[0]
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        pool_bytes = (self.send_pool_slots + self.recv_pool_slots) * self.datagram_size
        memory = physical_memory()
        if memory is not None and pool_bytes > memory:
            raise ConfigError(
                f"the pools need {pool_bytes} bytes ((MAILRAIL_SEND_POOL_SLOTS={self.send_pool_slots} + "
                f"MAILRAIL_RECV_POOL_SLOTS={self.recv_pool_slots}) x MAILRAIL_DATAGRAM_SIZE={self.datagram_size}), "
                f"more than this machine's {memory} bytes of physical memory"
            )
        if self.max_recvs is not None and self.max_recvs > self.recv_pool_slots:
            raise ConfigError(
                f"MAILRAIL_MAX_RECVS={self.max_recvs} exceeds MAILRAIL_RECV_POOL_SLOTS="
                f"{self.recv_pool_slots}: every posted receive needs its own slot"
            )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _read_knob(name: str, environ: Mapping[str, str], overrides: Mapping[str, Any]) -> tuple[Any, ...]:
    """``(value,)`` of knob *name* as the keyword or else the environment set it, or ``()`` if unset.

    A keyword wins; a variable that says otherwise is named in a :class:`ConfigWarning`, not silently ignored.
    """
    parse = KNOBS[name]
    variable = env_name(name)
    raw_variable = environ.get(variable, "")
    if overrides.get(name) is not None:
        raw = overrides[name]
        value = parse(variable, raw, name)
        if raw_variable.strip() != "" and _parsed_or_none(parse, variable, raw_variable) != value:
            warnings.warn(
                f"{name}={raw!r} (a keyword) overrides {variable}={raw_variable!r} from the environment",
                ConfigWarning,
                stacklevel=3,  # the caller of Config.from_env
            )
        return (value,)
    if raw_variable.strip() != "":  # a keyword wins: the variable is not even parsed
        return (parse(variable, raw_variable, None),)
    return ()


def _parsed_or_none(parse: Callable[..., Any], variable: str, raw: str) -> Any:
    """*raw* parsed as the knob's value, or None when it is no valid value (the keyword is used anyway)."""
    try:
        return parse(variable, raw, None)
    except ConfigError:
        return None


@dataclasses.dataclass(frozen=True)
class Knob:
    """What the documentation and the flags say about one knob."""

    name: str  #: the keyword argument
    variable: str  #: the environment variable
    default_text: str  #: the default, as documented
    help: str  #: its meaning, one line
    flag: bool  #: whether benchmarks take it as ``--name``


def knobs() -> list[Knob]:
    """Every knob, in the order of :class:`Config`'s fields."""
    return [
        Knob(f.name, env_name(f.name), f.metadata["shown"], f.metadata["help"], f.metadata["flag"])
        for f in dataclasses.fields(Config)
    ]


#: Each knob's parser, by name.
KNOBS: dict[str, Parser] = {f.name: f.metadata["parse"] for f in dataclasses.fields(Config)}


def default(name: str) -> Any:
    """The default of the knob *name* (a :class:`Config` field): what every tool that restates a knob uses."""
    if name not in Config.__dataclass_fields__:
        raise KeyError(f"no knob named {name!r}")
    return getattr(Config(), name)  # (the pools' slots derived at the default datagram size)


def physical_memory() -> int | None:
    """Bytes of physical memory of this machine, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def warn_unknown_variables(environ: Mapping[str, str]) -> None:
    """A :class:`~mailrail.errors.ConfigWarning` for each ``MAILRAIL_*`` variable that is neither a knob nor
    in :data:`NON_KNOB_VARIABLES`, naming the closest knob (``-W error::mailrail.ConfigWarning`` makes it fatal)."""
    known = [env_name(name) for name in KNOBS]
    for variable in sorted(environ):
        if not variable.startswith("MAILRAIL_") or variable in known or variable in NON_KNOB_VARIABLES:
            continue
        # Compared without the shared prefix, which would make every name look close.
        closest = difflib.get_close_matches(variable[len("MAILRAIL_") :], [name.upper() for name in KNOBS], n=1)
        hint = f"did you mean MAILRAIL_{closest[0]}?" if closest else f"the knobs are {', '.join(known)}"
        warnings.warn(f"unknown environment variable {variable} is ignored: {hint}", ConfigWarning, stacklevel=3)
