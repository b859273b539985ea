"""MailRail configuration: environment variables, overridden by keyword arguments.

Each knob has one environment variable (``MAILRAIL_<NAME>``) and one keyword
argument (``<name>``).  Values are validated once, at construction, and a bad
value raises :class:`~mailrail.errors.ConfigError` naming the variable and the
value.  The README documents every knob; :data:`KNOBS` is the single source.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Mapping

from .errors import ConfigError

FLOW_CONTROL_MODES = ("none", "rank", "node")
ATOMICS_MODES = ("auto", "cpu", "mpi")
ENGINE_MODES = ("auto", "compiled", "python")
_TRUE = {"1", "on", "true", "yes"}
_FALSE = {"0", "off", "false", "no"}


@dataclasses.dataclass(frozen=True)
class Config:
    datagram_size: int = 4096
    send_pool_slots: int = 256
    recv_pool_slots: int = 512
    max_recvs: int | None = None  # None: every receive slot is posted (= recv_pool_slots)
    flow_control: str = "none"
    credit_threshold: int = 2
    piggyback: bool = True
    ranks_per_node: int | None = None  # None: real shared-memory nodes
    credits_per_pair: int | None = None  # None: derived from recv_pool_slots
    stall_timeout: float = 0.0  # seconds; 0 disables stall detection
    idle_sleep_us: float = 0.0  # after IDLE_SPINS empty progress calls: 0 yields the core, > 0 sleeps
    atomics: str = "auto"
    # The message path: "auto" compiled when built, "compiled" an error when it is not, "python"
    # never.  MAILRAIL_TRACE always takes the Python path (it records each send).
    engine: str = "auto"
    trace: str | None = None  # directory to record a binary trace of this rank's sends

    @property
    def posted_receives(self) -> int:
        return self.recv_pool_slots if self.max_recvs is None else self.max_recvs

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> "Config":
        """Read ``MAILRAIL_*`` from *environ* (default ``os.environ``); keywords win."""
        environ = os.environ if environ is None else environ
        unknown = set(overrides) - set(KNOBS)
        if unknown:
            raise ConfigError(f"unknown MailRail option(s): {', '.join(sorted(unknown))}; "
                              f"valid options: {', '.join(KNOBS)}")
        values: dict[str, Any] = {}
        for name, parse in KNOBS.items():
            variable = env_name(name)
            if name in overrides and overrides[name] is not None:
                values[name] = parse(variable, overrides[name], keyword=name)
            elif variable in environ and environ[variable].strip() != "":
                values[name] = parse(variable, environ[variable], keyword=None)
        config = cls(**values)
        config.validate()
        return config

    def validate(self) -> None:
        if self.max_recvs is not None and self.max_recvs > self.recv_pool_slots:
            raise ConfigError(
                f"MAILRAIL_MAX_RECVS={self.max_recvs} exceeds MAILRAIL_RECV_POOL_SLOTS="
                f"{self.recv_pool_slots}: every posted receive needs its own slot")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def env_name(knob: str) -> str:
    return "MAILRAIL_" + knob.upper()


def _where(variable: str, keyword: str | None) -> str:
    return f"{keyword}= (keyword for {variable})" if keyword else variable


def _int(minimum: int) -> Callable[..., int]:
    def parse(variable: str, raw: Any, keyword: str | None) -> int:
        if isinstance(raw, bool):
            raise ConfigError(f"{_where(variable, keyword)} must be an integer, got {raw!r}")
        try:
            value = int(str(raw).strip(), 0) if isinstance(raw, str) else int(raw)
            if not isinstance(raw, str) and value != raw:
                raise ValueError
        except (TypeError, ValueError):
            raise ConfigError(f"{_where(variable, keyword)} must be an integer, got {raw!r}") from None
        if value < minimum:
            raise ConfigError(f"{_where(variable, keyword)} must be >= {minimum}, got {value}")
        return value
    return parse


def _float(minimum: float) -> Callable[..., float]:
    def parse(variable: str, raw: Any, keyword: str | None) -> float:
        if isinstance(raw, bool):
            raise ConfigError(f"{_where(variable, keyword)} must be a number, got {raw!r}")
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ConfigError(f"{_where(variable, keyword)} must be a number, got {raw!r}") from None
        if not value >= minimum or value == float("inf"):
            raise ConfigError(f"{_where(variable, keyword)} must be a finite number >= {minimum}, got {raw!r}")
        return value
    return parse


def _choice(choices: tuple[str, ...]) -> Callable[..., str]:
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
    try:
        path = os.fspath(raw)
    except TypeError:
        raise ConfigError(f"{_where(variable, keyword)} must be a directory path, got {raw!r}") from None
    return path.decode() if isinstance(path, bytes) else path


KNOBS: dict[str, Callable[..., Any]] = {
    "datagram_size": _int(1),
    "send_pool_slots": _int(1),
    "recv_pool_slots": _int(1),
    "max_recvs": _int(1),
    "flow_control": _choice(FLOW_CONTROL_MODES),
    "credit_threshold": _int(1),
    "piggyback": _bool,
    "ranks_per_node": _int(1),
    "credits_per_pair": _int(1),
    "stall_timeout": _float(0.0),
    "idle_sleep_us": _float(0.0),
    "atomics": _choice(ATOMICS_MODES),
    "engine": _choice(ENGINE_MODES),
    "trace": _path,
}
