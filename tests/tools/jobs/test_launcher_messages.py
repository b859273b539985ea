"""The MPI's own messages told apart from the ranks' output (sans-I/O: bytes in, bytes out).

The samples are what the MPIs printed here (Open MPI 5 and MPICH from the wheels, Open MPI 4 from
Debian's packages) when a rank raised (``MPI_Abort``) or was killed by SIGKILL; verbatim, long lines too.
"""

# ruff: noqa: E501

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mailrail_tools.jobs.launcher_messages import EndedProcess, LauncherMessageFilter, ended_processes

RULE = "-" * 74
OPEN_MPI_5_ABORT = f"""{RULE}
MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD
  Proc: [[1571,1],1]
  Errorcode: 1

NOTE: invoking MPI_ABORT causes Open MPI to kill all MPI processes.
You may or may not see output from other processes, depending on
exactly when Open MPI kills them.
{RULE}
{RULE}
prterun has exited due to process rank 1 with PID 0 on node vm calling
"abort". This may have caused other processes in the application to be
terminated by signals sent by prterun (as reported here).
{RULE}
"""
OPEN_MPI_5_KILLED = f"""{RULE}
prterun noticed that process rank 1 with PID 0 on node vm exited on
signal 9 (Killed).
{RULE}
"""
OPEN_MPI_4_KILLED = f"""{RULE}
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
{RULE}
{RULE}
mpirun noticed that process rank 2 with PID 4242 on node node-7 exited on signal 11 (Segmentation fault).
{RULE}
[vm:04242] 2 more processes have sent help message help-mpi-api.txt / mpi-abort
[vm:04242] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages
"""
HYDRA_KILLED = """
===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 8635 RUNNING AT vm
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
This typically refers to a problem with your application.
Please see the FAQ page for debugging suggestions
"""
# Open MPI 4's runtime, now and then in place of its abort box (seen with Debian's Open MPI 4.1)
OPEN_MPI_4_RUNTIME_ERROR = (
    "[vm:15107] [[6466,0],0] ORTE_ERROR_LOG: Data unpack had inadequate space in file ../orte/util/show_help.c"
    " at line 501\n"
)
MPICH_ABORT = "Abort(1) on node 1 (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1\n"
# a rank SIGKILLed on another node of a virtual cluster (TCP between the nodes): its peers' MPI gives up
OPEN_MPI_5_LOST_PEER = f"""[j62dd285da-head:25450] plm:ssh: Warning: setpgid(25458,25458) failed in parent with errno=Permission denied(13)
[j62dd285da-n0:00000] *** An error occurred in Socket closed
[j62dd285da-n0:00000] *** reported by process [1474887681,0]
[j62dd285da-n0:00000] *** MPI_ERRORS_ARE_FATAL (processes in this communicator will now abort,
{RULE}
An MPI communication peer process has unexpectedly disconnected.  This
usually indicates a failure in the peer process (e.g., a crash or
otherwise exiting without calling MPI_FINALIZE first).

  Local host: j62dd285da-n0
  Local PID:  25386
  Peer host:  j62dd285da-n1
{RULE}
{RULE}
prterun has exited due to process rank 0 with PID 0 on node j62dd285da-n0 calling
"abort". This may have caused other processes in the application to be
terminated by signals sent by prterun (as reported here).
{RULE}
"""
HYDRA_LOST_NODE = """[proxy:0@j6576a0efa-n0] HYD_pmcd_pmip_control_cmd_cb (/mpich-5.0.2/src/pm/hydra/proxy/pmip_cb.c:490): assert (!closed) failed
[mpiexec@j6576a0efa-head] HYDT_bscu_wait_for_completion (/mpich-5.0.2/src/pm/hydra/lib/tools/bootstrap/utils/bscu_wait.c:109): one of the processes terminated badly; aborting

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 26015 RUNNING AT 10.213.0.2
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
"""
SAMPLES = [
    OPEN_MPI_5_ABORT,
    OPEN_MPI_5_KILLED,
    OPEN_MPI_4_KILLED,
    OPEN_MPI_4_RUNTIME_ERROR,
    OPEN_MPI_5_LOST_PEER,
    HYDRA_KILLED,
    HYDRA_LOST_NODE,
    MPICH_ABORT,
]


def filtered(*pieces: str) -> tuple[str, str]:
    """(what is shown, what is kept) after feeding *pieces* one by one."""
    messages = LauncherMessageFilter()
    shown = b"".join(messages.feed(piece.encode()) for piece in pieces) + messages.finish()
    return shown.decode(), messages.text


def test_each_mpi_s_messages_are_kept_and_the_ranks_lines_shown():
    for sample in SAMPLES:
        shown, kept = filtered("[rank 1 on vm] ValueError: bad\n", sample, "after\n")
        assert shown == "[rank 1 on vm] ValueError: bad\nafter\n", sample
        assert kept == sample


def test_a_box_a_rank_printed_under_tag_output_is_kept_too():
    tagged = "".join(f"[rank 1] {line}\n" for line in OPEN_MPI_5_KILLED.splitlines())
    assert filtered("mine\n", tagged) == ("mine\n", tagged)


def test_a_rule_a_program_printed_is_shown_when_no_box_follows():
    # a lone rule, then ordinary lines: never closed, so it was the program's (shown at the end)
    text = f"{RULE}\nresults\n"
    assert filtered(text) == (text, "")
    # a Hydra rule followed by a line that is no box line: shown at once
    text = "=" * 60 + "\ntotal 3\n"
    assert filtered(text) == (text, "")
    # a box longer than any MPI's is the program's own
    text = RULE + "\n" + "row\n" * 100 + RULE + "\n"
    assert filtered(text) == (text, "")


def test_a_blank_line_is_kept_only_when_a_box_follows():
    assert filtered("a\n\nb\n") == ("a\n\nb\n", "")
    assert filtered("a\n", HYDRA_KILLED) == ("a\n", HYDRA_KILLED)


def test_an_unfinished_line_is_shown_at_once_unless_it_could_open_a_box():
    messages = LauncherMessageFilter()
    assert messages.feed(b"progress 10%") == b"progress 10%"
    assert messages.feed(b"... 20%") == b"... 20%"
    assert messages.feed(b" done\nnext") == b" done\nnext"
    assert messages.feed(b"\n" + RULE[:30].encode()) == b"\n"  # could be a rule: held
    assert messages.feed((RULE[30:] + "\nbox\n" + RULE + "\n").encode()) == b""
    assert messages.finish() == b""
    assert messages.text == f"{RULE}\nbox\n{RULE}\n"


def test_a_message_written_in_pieces_is_kept_whole():
    """Hydra writes ``[mpiexec@HOST] `` and its message in two writes."""
    messages = LauncherMessageFilter()
    assert messages.feed(b"[mpiexec@n0-head] ") == b""
    assert messages.feed(b"HYDT_bscu_wait_for_completion (bscu_wait.c:109): one of the processes terminated") == b""
    assert messages.feed(b" badly; aborting\n[rank 0] hello\n") == b"[rank 0] hello\n"
    assert messages.feed(b"Abort(1) on node 1") == b""
    assert messages.feed(b" (rank 1 in comm 0): application called MPI_Abort(MPI_COMM_WORLD, 1) - process 1\n") == b""
    assert messages.text.count("\n") == 2
    # the start of an ordinary line that looked like one for a moment is shown with its end
    assert messages.feed(b"[1, 2") == b""
    assert messages.feed(b", 3]\n") == b"[1, 2, 3]\n"
    assert messages.feed(b"Abo") == b""
    assert messages.feed(b"ut\n") == b"About\n"


def test_two_streams_keep_the_messages_in_one_list():
    stderr = LauncherMessageFilter()
    stdout = stderr.for_another_stream()
    stderr.feed(MPICH_ABORT.encode())
    stdout.feed(HYDRA_KILLED.encode())
    assert stderr.text == MPICH_ABORT + HYDRA_KILLED


def test_which_rank_ended_on_which_signal():
    assert ended_processes(OPEN_MPI_5_KILLED) == [EndedProcess(host="vm", rank=1, signal=9, signal_name="Killed")]
    assert ended_processes(OPEN_MPI_4_KILLED) == [
        EndedProcess(host="node-7", rank=2, signal=11, signal_name="Segmentation fault")
    ]
    # Hydra names the host and the signal, not the rank (its PID is the first rank's on the host)
    assert ended_processes(HYDRA_KILLED) == [EndedProcess(host="vm", signal=9, signal_name="Killed", exit_code=9)]
    assert ended_processes(OPEN_MPI_5_ABORT) == [EndedProcess(host="vm", rank=1, aborted=True)]
    assert ended_processes(OPEN_MPI_5_LOST_PEER) == [
        EndedProcess(host="j62dd285da-n0", rank=0, aborted=True, reason="a peer on j62dd285da-n1 disconnected")
    ]
    assert ended_processes(HYDRA_LOST_NODE) == [EndedProcess(host="10.213.0.2", exit_code=9)]
    assert ended_processes(MPICH_ABORT) == []


user_lines = st.lists(
    st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters="\n\0"), max_size=40).filter(
        lambda line: line.strip("-= \t\r")  # (a line of rules only may open a box: see the tests above)
    ),
    max_size=20,
)


@given(lines=user_lines, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10))
def test_the_ranks_output_passes_unchanged_however_it_is_cut(lines, cuts):
    data = "".join(f"{line}\n" for line in lines).encode()
    pieces = [data[start:end] for start, end in zip([0, *sorted(cuts)], [*sorted(cuts), len(data)], strict=True)]
    messages = LauncherMessageFilter()
    shown = b"".join(messages.feed(piece) for piece in pieces) + messages.finish()
    assert shown == data
    assert messages.messages == []


@given(
    blocks=st.lists(st.one_of(st.sampled_from(SAMPLES), user_lines.map(lambda ls: "".join(f"{x}\n" for x in ls)))),
    data=st.data(),
)
def test_messages_and_output_interleaved_in_whole_lines_come_apart(blocks, data):
    """However the stream is cut at line ends, the ranks' lines are shown in order and the MPI's kept."""
    lines = [line + b"\n" for line in "".join(blocks).encode().split(b"\n")[:-1]]
    ends = sorted(data.draw(st.sets(st.integers(min_value=0, max_value=len(lines)))))
    pieces = [b"".join(lines[start:end]) for start, end in zip([0, *ends], [*ends, len(lines)], strict=True)]
    messages = LauncherMessageFilter()
    shown = b"".join(messages.feed(piece) for piece in pieces) + messages.finish()
    assert shown.decode() == "".join(block for block in blocks if block not in SAMPLES)
    assert messages.text == "".join(block for block in blocks if block in SAMPLES)
