"""A first MailRail program: every rank sends a greeting to every rank, and counts what it gets.

Run: ``mailrail run -n 4 -- python examples/first_program.py``
"""

from mpi4py import MPI

from mailrail import MailRail, Message

greetings: list[str] = []


def keep(message: Message) -> None:
    greetings.append(bytes(message.data).decode())


with MailRail(MPI.COMM_WORLD) as rail:
    for dest in range(rail.size):
        buf = rail.reserve_send_buffer()
        while buf is None:  # backpressure: receiving makes the progress that frees send buffers
            message = rail.receive()
            if message is not None:
                keep(message)
                rail.release_receive_buffer(message)
            buf = rail.reserve_send_buffer()
        text = f"hello from {rail.rank}".encode()
        buf[: len(text)] = memoryview(text)  # written in place: the buffer is the message
        rail.send(dest, buf, len(text))
    rail.barrier(handler=keep)  # returns once every greeting, from every rank, has arrived
    print(f"rank {rail.rank}: {len(greetings)} greetings, the first from {sorted(greetings)[0]!r}", flush=True)
