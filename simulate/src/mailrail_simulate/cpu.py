"""Where the CPU goes on a run: ``mailrail simulate cpu-sample`` records it, ``cpu-split`` splits it per trial.

Standard library only, and Linux's ``/proc``: no MPI, no cluster.  The model's shared-cores parameters
(``host_cores``, ``idle_share``) say how ranks share a host's cores; these two commands measure it on a
``mailrail compare`` run on the virtual cluster.

:func:`sample` runs a command (normally ``mailrail compare ...``) as a child in a process group of its own,
passes its output through, and every *interval* seconds records the host's CPU times (``/proc/stat``) and,
for every descendant of the command that is an MPI rank (its environment has ``OMPI_COMM_WORLD_RANK`` or
``PMI_RANK``), its user and system clock ticks, context switches and scheduler group.  It writes, in the
output directory:

* ``cpu-samples.jsonl``: a header line (``format``, ``command``, ``pid``, ``clock_ticks``, ``interval``,
  ``cores``, ``started``), one line a sample (``t``: the monotonic clock; ``host``: the ``/proc/stat``
  times of :data:`HOST_FIELDS`, in clock ticks; ``ranks``: one ``[rank, pid, utime, stime, voluntary,
  nonvoluntary]`` a rank process; ``found``, the first time a rank process is seen: its ``rank``, its
  ``group`` (``/proc/PID/autogroup``, ``null`` without autogroups) and ``session``), and an end line
  (``end``, ``exit_status``, ``samples``);
* ``cpu-output.log``: each line of the command's output as ``TIME STREAM TEXT``, its time on the same
  monotonic clock, STREAM ``out`` or ``err``.

:func:`split` reads those and what ``compare`` wrote beside them (``compare.json``: the node of every
rank; ``adversarial-MODE.json``: each trial's runtime, messages delivered, goodput and victims).  A trial's
window ends when its ``trial i/n`` line was read and lasts its runtime; cumulative counters are interpolated
linearly to the window's ends.  (Rank 0 prints the line after the ranks' results are gathered and the
trial's metrics written, so the window ends a little late, by a small part of a trial.)
"""

from __future__ import annotations

import bisect
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

#: The files :func:`sample` writes.
SAMPLES = "cpu-samples.jsonl"
OUTPUT = "cpu-output.log"
FORMAT = "mailrail-cpu-samples"
#: The host's CPU times recorded, in ``/proc/stat``'s order.
HOST_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
#: Host times that are not work.
NOT_BUSY = ("idle", "iowait", "steal")
#: What makes a process an MPI rank: one of these in its environment (Open MPI, MPICH and Intel MPI).
RANK_VARIABLES = (b"OMPI_COMM_WORLD_RANK=", b"PMI_RANK=")
DEFAULT_INTERVAL = 0.25
#: How long the output is waited for once the command has ended (a process it left may hold its pipes).
OUTPUT_GRACE_S = 5.0


class CpuDataError(ValueError):
    """A sampled directory that cannot be split: the message names the file (and line)."""


# -- the sampler ----------------------------------------------------------------------------------------


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as source:
            return source.read()
    except OSError:  # the process ended, or is not ours to read
        return None


def host_times(text: str) -> tuple[list[int], int]:
    """The host's times of :data:`HOST_FIELDS` (clock ticks, summed over its cores) and its cores, from the
    text of ``/proc/stat``."""
    total: list[int] = []
    cores = 0
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if name == "cpu":
            total = [int(x) for x in rest.split()[: len(HOST_FIELDS)]]
        elif name.startswith("cpu") and name[3:].isdigit():
            cores += 1
    return total + [0] * (len(HOST_FIELDS) - len(total)), cores


def _process_stat(pid: int) -> tuple[int, int, int, int, int] | None:
    """(parent, session, utime, stime, start time) of a process, from ``/proc/PID/stat``; None if gone."""
    raw = _read(f"/proc/{pid}/stat")
    if raw is None:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()  # its name, in parentheses, may hold spaces and parentheses
    try:
        return int(fields[1]), int(fields[3]), int(fields[11]), int(fields[12]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _context_switches(pid: int) -> tuple[int, int]:
    """(voluntary, nonvoluntary) context switches of all a process's threads."""
    voluntary = nonvoluntary = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0, 0
    for thread in threads:
        for line in (_read(f"/proc/{pid}/task/{thread}/status") or b"").splitlines():
            if line.startswith(b"voluntary_ctxt_switches:"):
                voluntary += int(line.split()[1])
            elif line.startswith(b"nonvoluntary_ctxt_switches:"):
                nonvoluntary += int(line.split()[1])
    return voluntary, nonvoluntary


def _rank_of(pid: int) -> int | None:
    for item in (_read(f"/proc/{pid}/environ") or b"").split(b"\0"):
        for variable in RANK_VARIABLES:
            if item.startswith(variable):
                try:
                    return int(item[len(variable) :])
                except ValueError:
                    return None
    return None


def _group_of(pid: int) -> str | None:
    """The process's autogroup (``/autogroup-7786``): each session is one, and the scheduler shares the cores
    between them first; None without autogroups."""
    text = (_read(f"/proc/{pid}/autogroup") or b"").decode(errors="replace").split()
    return text[0] if text else None


class _Ranks:
    """The rank processes among a command's descendants, found by walking ``/proc`` from its PID."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.ranks: dict[int, tuple[int, int]] = {}  # pid -> (rank, start time): a reused pid is another process

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        host, _ = host_times((_read("/proc/stat") or b"").decode())
        stats = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                stat = _process_stat(int(name))
                if stat is not None:
                    stats[int(name)] = stat
        children: dict[int, list[int]] = {}
        for pid, stat in stats.items():
            children.setdefault(stat[0], []).append(pid)
        for pid in [p for p, (_, start) in self.ranks.items() if p not in stats or stats[p][4] != start]:
            del self.ranks[pid]  # ended
        found: dict[str, Any] = {}
        stack = [self.root]
        while stack:
            for pid in children.get(stack.pop(), ()):
                if pid in self.ranks:
                    continue  # a rank's children have its environment: they are not ranks
                rank = _rank_of(pid)  # read again each time: a fork has its parent's environment until it execs
                if rank is None:
                    stack.append(pid)
                    continue
                self.ranks[pid] = (rank, stats[pid][4])
                found[str(pid)] = {"rank": rank, "group": _group_of(pid), "session": stats[pid][1]}
        rows = []
        for pid, (rank, _) in sorted(self.ranks.items(), key=lambda item: item[1][0]):
            voluntary, nonvoluntary = _context_switches(pid)
            rows.append([rank, pid, stats[pid][2], stats[pid][3], voluntary, nonvoluntary])
        line: dict[str, Any] = {"t": round(now, 4), "host": host, "ranks": rows}
        if found:
            line["found"] = found
        return line


def _pass_through(source: IO[bytes], target: IO[str], stream: str, log: IO[str], lock: threading.Lock) -> None:
    for raw in iter(source.readline, b""):
        now = time.monotonic()
        text = raw.decode(errors="replace")
        with lock:
            target.write(text)
            target.flush()
            log.write(f"{now:.4f} {stream} {text.rstrip(chr(10))}\n")
            log.flush()


def sample(
    command: Sequence[str],
    out: str,
    interval: float = DEFAULT_INTERVAL,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
) -> int:
    """Run *command*, record its ranks' and the host's CPU into *out* until it ends; its exit status (128 +
    the signal that ended it).

    The command gets a process group of its own, not a session: a session is a scheduler group (autogroup),
    and a new one would change how the cores are shared.  SIGINT, SIGTERM and SIGHUP sent to the sampler
    (from the main thread) are passed to that group, and the sampler waits for the command to end.  Its
    standard input is ``/dev/null``: in a background group it could not read the terminal.
    """
    os.makedirs(out, exist_ok=True)
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    _, cores = host_times((_read("/proc/stat") or b"").decode())
    started = time.monotonic()
    child = subprocess.Popen(
        list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, process_group=0
    )
    assert child.stdout is not None and child.stderr is not None
    previous: dict[int, Any] = {}

    def forward(signum: int, frame: Any) -> None:
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:  # it has ended
            pass

    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            previous[signum] = signal.signal(signum, forward)
    lock = threading.Lock()
    samples = 0
    try:
        with open(os.path.join(out, SAMPLES), "w") as record, open(os.path.join(out, OUTPUT), "w") as log:
            header = {
                "format": FORMAT,
                "version": 1,
                "command": list(command),
                "pid": child.pid,
                "clock_ticks": os.sysconf("SC_CLK_TCK"),
                "interval": interval,
                "cores": cores,
                "started": round(started, 4),
                "started_wall": time.time(),
                "output": OUTPUT,
            }
            record.write(json.dumps(header) + "\n")
            readers = [
                threading.Thread(target=_pass_through, args=(pipe, target, name, log, lock), daemon=True)
                for pipe, target, name in ((child.stdout, stdout, "out"), (child.stderr, stderr, "err"))
            ]
            for reader in readers:
                reader.start()
            ranks = _Ranks(child.pid)
            while True:
                due = time.monotonic() + interval
                ended = child.poll() is not None  # one last sample once it has ended
                record.write(json.dumps(ranks.sample(), separators=(",", ":")) + "\n")
                record.flush()
                samples += 1
                if ended:
                    break
                time.sleep(max(0.0, due - time.monotonic()))
            for reader in readers:
                reader.join(OUTPUT_GRACE_S)
            status = child.wait()
            with lock:
                record.write(json.dumps({"end": round(time.monotonic(), 4), "exit_status": status, "samples": samples}))
                record.write("\n")
    finally:
        if child.poll() is None:  # the sampler failed: the command does not outlive it
            forward(signal.SIGTERM, None)
            child.wait()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 128 - status if status < 0 else status


# -- the analysis ---------------------------------------------------------------------------------------


def implied_idle_share(cores: float, nodes: int, node_ranks: int, victim_cores: float) -> float | None:
    """The idle share *s* the model's per-node rule implies: the cores split evenly over the nodes first, and
    a node of *node_ranks* ranks where the victim is busy and its mates wait gives the victim
    ``(cores / nodes) / (1 + (node_ranks - 1) * s)``; so ``s = ((cores / nodes) / victim_cores - 1) /
    (node_ranks - 1)``.  None for a victim alone on its node, or one that used no CPU."""
    if node_ranks < 2 or victim_cores <= 0:
        return None
    return ((cores / nodes) / victim_cores - 1) / (node_ranks - 1)


def _json_line(path: str, number: int, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as error:
        raise CpuDataError(f"{path}:{number}: not a JSON line ({error})") from None


def _read_lines(directory: str, name: str) -> tuple[str, list[str]]:
    """The path of cpu-sample's file *name* in *directory*, and its lines."""
    path = os.path.join(directory, name)
    try:
        with open(path) as source:
            return path, source.read().splitlines()
    except OSError as error:
        raise CpuDataError(f"{path}: {error.strerror or error} (mailrail simulate cpu-sample writes it)") from None


def _load_samples(directory: str) -> tuple[dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    path, lines = _read_lines(directory, SAMPLES)
    if not lines:
        raise CpuDataError(f"{path}:1: empty")
    header = _json_line(path, 1, lines[0])
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CpuDataError(f"{path}:1: not the header of mailrail simulate cpu-sample's samples")
    samples = []
    for number, text in enumerate(lines[1:], 2):
        line = _json_line(path, number, text)
        if isinstance(line, dict) and "end" in line:
            continue
        if (
            not isinstance(line, dict)
            or not isinstance(line.get("t"), (int, float))
            or not isinstance(line.get("host"), list)
            or len(line["host"]) != len(HOST_FIELDS)
            or not isinstance(line.get("ranks"), list)
            or not all(isinstance(row, list) and len(row) == 6 for row in line["ranks"])
        ):
            raise CpuDataError(f"{path}:{number}: not a sample (t, host: {len(HOST_FIELDS)} times, ranks: rows of 6)")
        samples.append((number, line))
    if len(samples) < 2:
        raise CpuDataError(f"{path}: {len(samples)} sample(s): at least 2 are needed")
    return header, samples


#: compare's output: a run (with --runs), a mode, a trial.
RUN = re.compile(r"^=== run (\d+)/\d+ ===")
MODE = re.compile(r"^\[\d+/\d+\] flow control (\S+) \(limit")
TRIAL = re.compile(r"^\s*trial (\d+)/(\d+): ([\d.]+) s, goodput")


def _trial_lines(directory: str) -> list[tuple[int | None, str, int, float]]:
    """(run, mode, trial, time its line was read) from the command's output, in order."""
    path, lines = _read_lines(directory, OUTPUT)
    run: int | None = None
    mode: str | None = None
    trials = []
    for number, line in enumerate(lines, 1):
        stamp, _, rest = line.partition(" ")
        stream, _, text = rest.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            when = None
        if when is None or stream not in ("out", "err"):
            raise CpuDataError(f"{path}:{number}: not TIME STREAM TEXT (STREAM out or err)")
        if match := RUN.match(text):
            run = int(match.group(1))
        elif match := MODE.match(text):
            mode = match.group(1)
        elif (match := TRIAL.match(text)) and mode is not None:
            trials.append((run, mode, int(match.group(1)), when))
    if not trials:
        raise CpuDataError(f"{path}: no 'trial i/n' lines of mailrail compare: nothing to split")
    return trials


def _load_json(path: str) -> Any:
    try:
        with open(path) as source:
            return json.load(source)
    except OSError as error:
        raise CpuDataError(f"{path}: {error.strerror or error} (mailrail compare writes it)") from None
    except ValueError as error:
        raise CpuDataError(f"{path}: not JSON ({error})") from None


def _interpolate(times: list[float], values: list[float], at: float) -> float:
    i = bisect.bisect_left(times, at)
    if i == 0:
        return values[0]
    if i == len(times):
        return values[-1]
    t0, t1 = times[i - 1], times[i]
    return values[i - 1] + (values[i] - values[i - 1]) * (at - t0) / (t1 - t0)


class _Counters:
    """Cumulative counters sampled at *times*: their growth over a window, interpolated at its ends."""

    def __init__(self, times: list[float], rows: list[list[float]]) -> None:
        self.times, self.rows = times, rows

    def covers(self, start: float, end: float) -> bool:
        return len(self.times) >= 2 and self.times[0] <= start and self.times[-1] >= end

    def growth(self, start: float, end: float) -> list[float]:
        return [
            _interpolate(self.times, column, end) - _interpolate(self.times, column, start)
            for column in map(list, zip(*self.rows))
        ]


def _mean(values: list[Any]) -> Any:
    """The mean of numbers, or of dicts of them key by key (None where a trial has none)."""
    if values and all(isinstance(v, dict) for v in values):
        return {key: _mean([v.get(key) for v in values]) for key in values[0]}
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return statistics.fmean(numbers) if numbers and len(numbers) == len(values) else None


def split(directory: str) -> dict[str, Any]:
    """Per mode and trial of a sampled ``compare`` run in *directory*: where its CPU went, per delivered
    message and as shares of the cores; and each mode's means over its trials.  :class:`CpuDataError`
    names the file (and line) it cannot read."""
    header, samples = _load_samples(directory)
    ticks = float(header["clock_ticks"])
    cores = int(header["cores"])
    host = _Counters([s["t"] for _, s in samples], [s["host"] for _, s in samples])
    processes: dict[int, tuple[int, list[float], list[list[float]]]] = {}  # pid -> (rank, times, counters)
    groups: dict[int, str | None] = {}
    for _, line in samples:
        for row in line["ranks"]:
            rank, pid = int(row[0]), int(row[1])
            processes.setdefault(pid, (rank, [], []))
            processes[pid][1].append(line["t"])
            processes[pid][2].append([float(x) for x in row[2:]])
        for pid, info in line.get("found", {}).items():
            groups[int(pid)] = info.get("group")
    compare_path = os.path.join(directory, "compare.json")
    compare = _load_json(compare_path)
    try:
        rank_nodes = [int(n) for n in compare["workload"]["rank_nodes"]]
    except (KeyError, TypeError, ValueError):
        raise CpuDataError(f"{compare_path}: no workload.rank_nodes (the node of each rank)") from None
    nodes = len(set(rank_nodes))
    documents: dict[str, Any] = {}
    trials = []
    for run, mode, trial, read_at in _trial_lines(directory):
        path = os.path.join(directory, *([f"run-{run}"] if run else []), f"adversarial-{mode}.json")
        if path not in documents:
            documents[path] = _load_json(path)
        document = documents[path]
        try:
            record = document["trials"][trial - 1]
            runtime, messages = float(record["runtime_s"]), int(record["messages_received"])
            goodput = float(record["goodput_bps"])
            victims = [int(v) for v in document["victim_ranks"]]
        except (KeyError, IndexError, TypeError, ValueError):
            raise CpuDataError(f"{path}: no trial {trial} with runtime_s, messages_received, goodput_bps") from None
        start, end = read_at - runtime, read_at
        if not host.covers(start, end):
            raise CpuDataError(
                f"{os.path.join(directory, SAMPLES)}: no samples around {mode} trial {trial} ({start:.2f}-{end:.2f} s)"
            )
        times = dict(zip(HOST_FIELDS, (x / ticks for x in host.growth(start, end))))
        total = sum(times.values())
        busy = total - sum(times[f] for f in NOT_BUSY)
        # per rank: the process that lived through the window (each mode's job has its own processes)
        ranks: dict[int, list[float]] = {}
        rank_groups: dict[int, str | None] = {}
        for pid, (rank, stamps, rows) in processes.items():
            counters = _Counters(stamps, rows)
            if counters.covers(start, end):
                utime, stime, voluntary, nonvoluntary = counters.growth(start, end)
                ranks[rank] = [utime / ticks, stime / ticks, voluntary, nonvoluntary]
                rank_groups[rank] = groups.get(pid)
        if any(r >= len(rank_nodes) for r in ranks):
            raise CpuDataError(
                f"{compare_path}: workload.rank_nodes has {len(rank_nodes)} ranks, the samples rank {max(ranks)}"
            )
        missing = sorted(set(range(len(rank_nodes))) - set(ranks))
        if any(v not in ranks for v in victims):
            raise CpuDataError(
                f"{os.path.join(directory, SAMPLES)}: no victim rank {victims} through {mode} trial {trial}"
            )
        ranks_figures = _rank_figures(ranks, victims, rank_nodes, runtime, messages, cores)
        trials.append(
            {
                "run": run,
                "mode": mode,
                "trial": trial,
                "window_s": runtime,
                "window_end": end,
                "messages": messages,
                "goodput_mbps": goodput / 1e6,
                "ranks_sampled": len(ranks),
                "ranks_missing": missing,
                "host_percent": {f: 100 * times[f] / total for f in HOST_FIELDS},
                "host_busy_cores": busy / runtime,
                "host_busy_us_per_message": 1e6 * busy / messages,
                **ranks_figures,
                "one_group_per_node": _one_group_per_node(rank_groups, rank_nodes),
            }
        )
    modes: dict[str, Any] = {}
    for mode in dict.fromkeys(t["mode"] for t in trials):
        mine = [t for t in trials if t["mode"] == mode]
        modes[mode] = {
            "trials": len(mine),
            **{
                key: _mean([t[key] for t in mine])
                for key in mine[0]
                if key not in ("run", "mode", "trial", "window_end", "ranks_missing", "one_group_per_node")
            },
            "one_group_per_node": all(t["one_group_per_node"] for t in mine)
            if all(t["one_group_per_node"] is not None for t in mine)
            else None,
        }
    return {
        "benchmark": "simulate-cpu-split",
        "directory": directory,
        "command": header.get("command"),
        "cores": cores,
        "clock_ticks": ticks,
        "interval_s": header.get("interval"),
        "ranks": len(rank_nodes),
        "nodes": nodes,
        "trials": trials,
        "modes": modes,
    }


def _rank_figures(
    ranks: dict[int, list[float]], victims: list[int], rank_nodes: list[int], runtime: float, messages: int, cores: int
) -> dict[str, Any]:
    """A trial's figures from its ranks' growth over its window (*ranks*: rank -> [user s, system s,
    voluntary, nonvoluntary context switches]).  With several victims the shares are each victim's mean, and
    the implied idle share assumes each has its node to itself."""
    senders = [r for r in ranks if r not in victims]

    def per_message(members: list[int], column: int) -> float:
        return sum(ranks[r][column] for r in members) / messages

    def cores_of(members: list[int]) -> float:
        return sum(ranks[r][0] + ranks[r][1] for r in members) / runtime

    nodes = sorted(set(rank_nodes))
    node_cores = {n: cores_of([r for r in ranks if rank_nodes[r] == n]) for n in nodes}
    victim_cores = statistics.fmean(cores_of([v]) for v in victims)
    node_ranks = rank_nodes.count(rank_nodes[victims[0]])
    return {
        "victim_user_us_per_message": 1e6 * per_message(victims, 0),
        "victim_system_us_per_message": 1e6 * per_message(victims, 1),
        "victim_us_per_message": 1e6 * (per_message(victims, 0) + per_message(victims, 1)),
        "senders_user_us_per_message": 1e6 * per_message(senders, 0),
        "senders_system_us_per_message": 1e6 * per_message(senders, 1),
        "senders_us_per_message": 1e6 * (per_message(senders, 0) + per_message(senders, 1)),
        "victim_voluntary_cs_per_message": per_message(victims, 2),
        "victim_nonvoluntary_cs_per_message": per_message(victims, 3),
        "senders_voluntary_cs_per_message": per_message(senders, 2),
        "senders_nonvoluntary_cs_per_message": per_message(senders, 3),
        "victim_cores": victim_cores,
        "victim_share_of_host": victim_cores / cores,
        "node_cores_fair": cores / len(nodes),
        "node_cores_min": min(node_cores.values()),
        "node_cores_max": max(node_cores.values()),
        "victim_share_of_node": statistics.fmean(
            cores_of([v]) / max(node_cores[rank_nodes[v]], 1e-12) for v in victims
        ),
        "victim_node_ranks": node_ranks,
        "implied_idle_share": implied_idle_share(cores, len(nodes), node_ranks, victim_cores),
    }


def _one_group_per_node(groups: dict[int, str | None], rank_nodes: list[int]) -> bool | None:
    """Whether each node's ranks shared one scheduler group, a group of their own; None if unknown."""
    if not groups or any(g is None for g in groups.values()):
        return None
    by_node: dict[int, set[str | None]] = {}
    for rank, group in groups.items():
        by_node.setdefault(rank_nodes[rank], set()).add(group)
    seen = [g for node_groups in by_node.values() for g in node_groups]
    return all(len(g) == 1 for g in by_node.values()) and len(seen) == len(set(seen))
