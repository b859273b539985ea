"""``mailrail simulate cpu-sample`` and ``cpu-split``: the sampler on a real command (no MPI), the split of the
shipped runs against the figures measured when they were recorded, a hand-made run whose figures are known,
and the refusals of bad input."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mailrail_simulate import cpu
from mailrail_simulate.cpu import CpuDataError, implied_idle_share, split
from mailrail_tools.cli import main

DATA = Path(cpu.__file__).parent / "data" / "cpu"
SIXTEEN = DATA / "queue-16kb-nodes-4"


def run(*argv: str) -> int:
    try:
        return main(list(argv))
    except SystemExit as exit:
        return int(exit.code or 0)


# -- the analysis ---------------------------------------------------------------------------------------


def test_implied_idle_share_inverts_the_per_node_rule():
    # 2 cores over 4 nodes: 0.5 a node; with 4 ranks on the victim's node and idle share 1/3, the victim gets
    # 0.5 / (1 + 3 / 3) = 0.25 of a core
    assert implied_idle_share(2, 4, 4, 0.25) == pytest.approx(1 / 3)
    assert implied_idle_share(2, 4, 4, 0.5) == pytest.approx(0.0)  # the node's whole share: its mates cost nothing
    assert implied_idle_share(2, 4, 1, 0.25) is None  # alone on its node: no mates to tell s by
    assert implied_idle_share(2, 4, 4, 0.0) is None


#: The figures measured when the 16-rank run was recorded (the prototype's table): per mode and trial, the
#: goodput, the victim's user and system CPU per message (us) and its cores.
SIXTEEN_MEASURED = {
    ("node", 1): (544, 4.4, 9.1, 0.224),
    ("node", 2): (580, 3.4, 12.5, 0.281),
    ("none", 1): (502, 2.4, 15.6, 0.276),
    ("none", 2): (564, 2.5, 14.3, 0.289),
}


def test_split_of_the_shipped_16_rank_run_gives_the_figures_measured():
    document = split(str(SIXTEEN))
    assert (document["ranks"], document["nodes"], document["cores"]) == (16, 4, 2)
    assert {(t["mode"], t["trial"]) for t in document["trials"]} == set(SIXTEEN_MEASURED)
    for trial in document["trials"]:
        goodput, user, system, cores = SIXTEEN_MEASURED[(trial["mode"], trial["trial"])]
        assert trial["goodput_mbps"] == pytest.approx(goodput, abs=1)
        assert trial["victim_user_us_per_message"] == pytest.approx(user, abs=0.06)
        assert trial["victim_system_us_per_message"] == pytest.approx(system, abs=0.06)
        assert trial["victim_cores"] == pytest.approx(cores, abs=0.0006)
        assert trial["ranks_sampled"] == 16 and not trial["ranks_missing"] and trial["one_group_per_node"]
        assert sum(trial["host_percent"].values()) == pytest.approx(100)
        # the cores went to the nodes about evenly (0.5 each), less what no rank was charged (softirqs)
        assert 0.4 < trial["node_cores_min"] <= trial["node_cores_max"] <= 0.5
        assert trial["implied_idle_share"] == pytest.approx(implied_idle_share(2, 4, 4, trial["victim_cores"]))
    for mode in ("node", "none"):
        mean = document["modes"][mode]
        mine = [t for t in document["trials"] if t["mode"] == mode]
        assert mean["trials"] == 2 and mean["one_group_per_node"]
        assert mean["victim_cores"] == pytest.approx(sum(t["victim_cores"] for t in mine) / 2)


@pytest.mark.parametrize("name", ["queue-16kb-nodes-16-messages-500", "queue-16kb-nodes-16-messages-500-rank"])
def test_the_held_out_64_rank_runs_split_with_one_scheduler_group_a_node(name):
    document = split(str(DATA / name))
    assert (document["ranks"], document["nodes"]) == (64, 16)
    for trial in document["trials"]:
        assert trial["ranks_sampled"] == 64 and trial["one_group_per_node"]
        assert 0.1 < trial["node_cores_min"] <= trial["node_cores_max"] <= 0.125  # 2 cores over 16 nodes


def _write_run(directory: Path, samples: list[dict], output: list[str]) -> None:
    """A hand-made sampled compare run: 4 ranks on 2 nodes sharing 2 cores, victim rank 1, 1,000 messages in
    a trial of 2 s."""
    directory.mkdir(exist_ok=True)
    header = {"format": cpu.FORMAT, "version": 1, "command": ["x"], "pid": 1, "clock_ticks": 100}
    header.update({"interval": 1.0, "cores": 2, "started": 0.0, "output": cpu.OUTPUT})
    lines = [json.dumps(header), *map(json.dumps, samples), json.dumps({"end": 9, "exit_status": 0, "samples": 4})]
    (directory / cpu.SAMPLES).write_text("\n".join(lines) + "\n")
    (directory / cpu.OUTPUT).write_text("\n".join(output) + "\n")
    (directory / "compare.json").write_text(json.dumps({"workload": {"rank_nodes": [0, 0, 1, 1]}}))
    trial = {"runtime_s": 2.0, "messages_received": 1000, "goodput_bps": 16.384e6}
    (directory / "adversarial-node.json").write_text(json.dumps({"victim_ranks": [1], "trials": [trial]}))


def _hand_made_samples() -> list[dict]:
    """At t = 0..3 s: the host 1 core user, 0.5 system, 0.5 idle; the victim (rank 1) 0.1 core user and 0.2
    system; each other rank 0.4 core, a context switch every 10 ms."""
    samples = []
    for t in range(4):
        host = [100 * t, 0, 50 * t, 50 * t, 0, 0, 0, 0]
        ranks = [[r, 100 + r, 20 * t, 20 * t, 0, 100 * t] for r in (0, 2, 3)] + [[1, 101, 10 * t, 20 * t, 5 * t, 0]]
        line: dict = {"t": float(t), "host": host, "ranks": ranks}
        if t == 0:
            groups = {0: "/autogroup-1", 1: "/autogroup-1", 2: "/autogroup-2", 3: "/autogroup-2"}
            line["found"] = {str(100 + r): {"rank": r, "group": g, "session": 9} for r, g in groups.items()}
        samples.append(line)
    return samples


OUTPUT = [
    "0.1000 out [1/1] flow control node (limit 120 s)",
    "0.2000 err a warning",
    "2.5000 out   trial 1/1: 2.000 s, goodput 16.4 Mb/s",
]


def test_split_of_a_hand_made_run_gives_its_known_figures(tmp_path):
    _write_run(tmp_path, _hand_made_samples(), OUTPUT)
    (trial,) = split(str(tmp_path))["trials"]  # the window is 0.5-2.5 s: counters interpolated between samples
    assert (trial["mode"], trial["trial"], trial["messages"], trial["goodput_mbps"]) == ("node", 1, 1000, 16.384)
    assert trial["host_percent"]["user"] == pytest.approx(50) and trial["host_percent"]["idle"] == pytest.approx(25)
    assert trial["host_busy_cores"] == pytest.approx(1.5)
    assert trial["victim_user_us_per_message"] == pytest.approx(200)  # 0.1 core x 2 s / 1,000 messages
    assert trial["victim_system_us_per_message"] == pytest.approx(400)
    assert trial["senders_us_per_message"] == pytest.approx(3 * 800)
    assert trial["victim_voluntary_cs_per_message"] == pytest.approx(0.01)
    assert trial["senders_nonvoluntary_cs_per_message"] == pytest.approx(3 * 0.2)
    assert trial["victim_cores"] == pytest.approx(0.3) and trial["victim_share_of_host"] == pytest.approx(0.15)
    assert (trial["node_cores_min"], trial["node_cores_max"]) == pytest.approx((0.7, 0.8))
    assert trial["victim_share_of_node"] == pytest.approx(0.3 / 0.7)
    assert trial["implied_idle_share"] == pytest.approx(1 / 0.3 - 1)  # a core a node, one mate
    assert trial["one_group_per_node"] is True


# -- bad input ------------------------------------------------------------------------------------------


def test_a_malformed_samples_line_is_refused_naming_its_line(tmp_path, capsys):
    shutil.copytree(SIXTEEN, tmp_path / "run")
    path = tmp_path / "run" / cpu.SAMPLES
    lines = path.read_text().splitlines()
    lines[4] = lines[4][: len(lines[4]) // 2]  # line 5, cut short
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(CpuDataError, match=rf"{cpu.SAMPLES}:5: not a JSON line"):
        split(str(tmp_path / "run"))
    assert run("simulate", "cpu-split", str(tmp_path / "run")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("mailrail simulate cpu-split: error: ") and ":5: " in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / cpu.SAMPLES).unlink(), rf"{cpu.SAMPLES}: No such file"),
        (lambda d: (d / cpu.SAMPLES).write_text('{"t": 1}\n'), rf"{cpu.SAMPLES}:1: not the header"),
        (lambda d: (d / cpu.OUTPUT).write_text("nonsense\n"), rf"{cpu.OUTPUT}:1: not TIME STREAM TEXT"),
        (lambda d: (d / cpu.OUTPUT).write_text("1.0 out hello\n"), "no 'trial i/n' lines"),
        (lambda d: (d / "adversarial-node.json").unlink(), "adversarial-node.json: No such file"),
        (lambda d: (d / "compare.json").write_text("{}"), "no workload.rank_nodes"),
    ],
)
def test_bad_input_is_refused_naming_the_file(tmp_path, change, message):
    _write_run(tmp_path, _hand_made_samples(), OUTPUT)
    change(tmp_path)
    with pytest.raises(CpuDataError, match=message):
        split(str(tmp_path))


def test_a_sample_line_of_the_wrong_shape_is_refused_naming_its_line(tmp_path):
    samples = _hand_made_samples()
    samples[2]["host"] = [1, 2, 3]
    _write_run(tmp_path, samples, OUTPUT)
    with pytest.raises(CpuDataError, match=rf"{cpu.SAMPLES}:4: not a sample"):
        split(str(tmp_path))


# -- the commands ---------------------------------------------------------------------------------------


def test_cpu_split_prints_the_shipped_run_in_100_columns_and_writes_json(tmp_path, capsys):
    out = tmp_path / "split.json"
    assert run("simulate", "cpu-split", str(SIXTEEN), "--json", str(out)) == 0
    printed = capsys.readouterr().out
    assert all(len(line) <= 100 for line in printed.splitlines())
    assert "left out" not in printed  # every column fits
    assert "0.224" in printed and "0.289" in printed and "a group a node: node, none" in printed
    assert json.loads(out.read_text())["modes"].keys() == {"node", "none"}
    assert run("simulate", "cpu-split", "queue-16kb-nodes-4") == 0  # a shipped run, by name
    assert capsys.readouterr().out == printed.replace(f"wrote {out}\n", "")


#: A command that is not MPI: two grandchildren with OMPI_COMM_WORLD_RANK set burn 0.5 s of CPU each, then
#: wait a little, so that a sample sees their last ticks; it prints a compare-like line and exits 3.
FAMILY = textwrap.dedent(
    """
    import os, subprocess, sys
    burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.5: pass\\ntime.sleep(0.5)\\n"
    ranks = [
        subprocess.Popen([sys.executable, "-c", burn], env={**os.environ, "OMPI_COMM_WORLD_RANK": str(r)})
        for r in (0, 1)
    ]
    print("  trial 1/1: 1.000 s, goodput 1.0 Mb/s", flush=True)
    print("on stderr", file=sys.stderr, flush=True)
    for rank in ranks:
        rank.wait()
    sys.exit(3)
    """
)


def test_cpu_sample_finds_the_ranks_among_descendants_records_their_ticks_and_passes_the_status(tmp_path, capsys):
    status = run(
        "simulate", "cpu-sample", "--out", str(tmp_path), "--interval", "0.05", "--", sys.executable, "-c", FAMILY
    )
    assert status == 3
    printed = capsys.readouterr()
    assert "trial 1/1: 1.000 s" in printed.out and "on stderr" in printed.err  # passed through
    lines = [json.loads(line) for line in (tmp_path / cpu.SAMPLES).read_text().splitlines()]
    header, samples, end = lines[0], lines[1:-1], lines[-1]
    assert header["format"] == cpu.FORMAT and header["command"][-1] == FAMILY and header["cores"] >= 1
    assert end == {"end": end["end"], "exit_status": 3, "samples": len(samples)}
    found = {int(pid): info for s in samples for pid, info in s.get("found", {}).items()}
    assert sorted(info["rank"] for info in found.values()) == [0, 1]  # the grandchildren, not their parent
    assert header["pid"] not in found
    for pid, info in found.items():
        assert info["group"] is None or info["group"].startswith("/autogroup-")
        ticks = [row[2] + row[3] for s in samples for row in s["ranks"] if row[1] == pid]
        assert ticks == sorted(ticks) and ticks[-1] >= 0.4 * header["clock_ticks"]  # 0.5 s of CPU each
    assert all(len(s["host"]) == len(cpu.HOST_FIELDS) for s in samples)
    assert [s["t"] for s in samples] == sorted(s["t"] for s in samples)
    output = (tmp_path / cpu.OUTPUT).read_text().splitlines()
    streams = {line.split(" ", 2)[1]: line.split(" ", 2)[2] for line in output}
    assert streams == {"out": "  trial 1/1: 1.000 s, goodput 1.0 Mb/s", "err": "on stderr"}
    assert all(header["started"] <= float(line.split(" ", 1)[0]) <= end["end"] for line in output)


def test_cpu_sample_passes_sigterm_to_the_command_and_waits_for_it(tmp_path):
    command = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    sampler = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mailrail_tools",
            "simulate",
            "cpu-sample",
            "--out",
            str(tmp_path),
            "--",
            sys.executable,
            "-c",
            command,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert sampler.stdout is not None and sampler.stdout.readline() == "ready\n"
        os.kill(sampler.pid, signal.SIGTERM)
        assert sampler.wait(timeout=60) == 7  # the command's own exit, after the signal it was passed
    finally:
        if sampler.poll() is None:
            sampler.kill()
            sampler.wait()
    assert json.loads((tmp_path / cpu.SAMPLES).read_text().splitlines()[-1])["exit_status"] == 7


def test_cpu_sample_without_a_command_is_a_usage_error(tmp_path, capsys):
    assert run("simulate", "cpu-sample", "--out", str(tmp_path)) == 2
    assert "no command" in capsys.readouterr().err
