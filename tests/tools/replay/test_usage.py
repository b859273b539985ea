"""The trace tools' user errors: flags out of range, a missing matplotlib, malformed traces: one line, exit 2."""

import shutil
import sys

import pytest

from mailrail_tools.cli import main


def out_of_range(trace: str, out: str) -> list:
    return [
        (["replay", trace, "--datagram-size", "0"], "argument --datagram-size: must be an integer in 1..2147483647"),
        (["replay", trace, "--timeout", "-5"], "argument --timeout: must be a number in 0.001..1e+07, got '-5'"),
        (["replay", trace, "--flow-control", "x"], "argument --flow-control: must be one of none, rank, node"),
        (["trace", "stats", trace, "--top", "-1"], "argument --top: must be an integer in 0..2147483647, got '-1'"),
        (["trace", "generate", out, "--ranks", "0"], "argument --ranks: must be an integer in 1..1048576, got '0'"),
        (["trace", "generate", out, "--phases", "0"], "argument --phases: must be an integer in 1..16777216"),
        (["trace", "generate", out, "--scale", "41"], "argument --scale: must be an integer in 1..40, got '41'"),
        (["trace", "generate", out, "--zipf-exponent", "-1"], "argument --zipf-exponent: must be a number in 0..100"),
        (
            ["trace", "generate", out, "--messages", "1.5"],
            "argument --messages: must be an integer in 0..1099511627776",
        ),
        (["trace", "generate", out, "--edge-factor", "0"], "argument --edge-factor: must be an integer in 1..65536"),
    ]


@pytest.mark.parametrize("case", range(10))
def test_a_trace_flag_out_of_range_is_one_line_and_writes_nothing(case, binary_trace, tmp_path, capsys):
    out = tmp_path / "generated"
    argv, expected = out_of_range(str(binary_trace), str(out))[case]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    command = "replay" if argv[0] == "replay" else " ".join(argv[:2])
    assert capsys.readouterr().err.startswith(f"mailrail {command}: error: {expected}")
    assert not out.exists()


def test_a_trace_too_large_for_the_disk_is_refused_before_any_file(tmp_path, capsys):
    out = tmp_path / "huge"
    assert main(["trace", "generate", str(out), "--ranks", "1024", "--messages", str(1 << 40)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mailrail trace generate: error: the trace needs ") and "GiB free under" in err
    assert len(err.splitlines()) == 1 and not out.exists()


def test_trace_stats_without_matplotlib_says_what_to_install(monkeypatch, binary_trace, tmp_path, capsys):
    for name in [n for n in sys.modules if n == "matplotlib" or n.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    document, png = tmp_path / "stats.json", tmp_path / "heatmap.png"
    assert main(["trace", "stats", str(binary_trace), "--json", str(document), "--heatmap", str(png)]) == 2
    assert capsys.readouterr().err == (
        "mailrail trace stats: error: trace stats needs matplotlib for the heatmap: "
        "pip install 'mailrail[plot]' (or --no-heatmap)\n"
    )
    assert not document.exists() and not png.exists()
    assert main(["trace", "stats", str(binary_trace), "--no-heatmap", "--json", str(document)]) == 0
    assert document.exists()


def test_a_malformed_trace_is_one_line_for_trace_stats(binary_trace, tmp_path, capsys):
    (tmp_path / "trace_0.bin").write_bytes((binary_trace / "trace_0.bin").read_bytes()[:-1])
    shutil.copy(binary_trace / "trace_1.bin", tmp_path / "trace_1.bin")
    document = tmp_path / "stats.json"
    assert main(["trace", "stats", str(tmp_path), "--no-heatmap", "--json", str(document)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"mailrail trace stats: {tmp_path}/trace_0.bin: byte offset 21732: truncated barrier_end")
    assert len(err.splitlines()) == 1
    assert not document.exists()


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_malformed_trace_is_one_line_for_the_replay_job(binary_trace, tmp_path):
    shutil.copy(binary_trace / "trace_0.bin", tmp_path / "trace_0.bin")
    (tmp_path / "trace_1.bin").write_bytes((binary_trace / "trace_1.bin").read_bytes()[:-1])
    from helpers import mailrail_job

    result = tmp_path / "replay.json"
    completed = mailrail_job(2, "replay", tmp_path, "--json", result, timeout=60)
    assert completed.returncode == 2, completed.stderr[-3000:]
    lines = [line for line in completed.stderr.splitlines() if line.startswith("mailrail replay:")]
    assert len(lines) == 1, completed.stderr[-3000:]
    assert lines[0].startswith(f"mailrail replay: {tmp_path}/trace_1.bin: byte offset ")
    assert "Traceback" not in completed.stderr and not result.exists()
