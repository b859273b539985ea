"""``mailrail app moe``: Mixture-of-Experts token routing (dispatch, expert, combine).

Each rank holds ``--tokens`` tokens of ``--hidden`` float32 features.  A gate
gives every token its top-k of ``--experts`` experts, drawn with Zipf
popularity (``--skew``; 0 is uniform), so the ranks holding popular experts
become incast victims, as in real MoE training.  Expert ``e`` lives on rank
``e mod ranks`` and is a real weight matrix: dispatch sends each (token,
expert) pair's features there, the expert multiplies them, and combine sends
the result back to the token's home rank, which sums the results weighted by
the gate.  On MailRail the experts start on the tokens that have arrived while
others are still on their way; the peer dispatches and combines with two
``Alltoallv`` exchanges, as PyTorch's ``all_to_all_single`` does.

Run: ``mailrail run -n 4 app moe --skew 1.2 --modes none,rank,node --baseline alltoallv``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from mailrail import Rail

from ..alltoallv import alltoallv_exchange as exchange
from ..flags import float_in, int_in, usage_error
from ..memory import memory_problem
from .frame import add_app_arguments, app_rail_options, run_app

#: Tokens an expert collects before it multiplies them; its last batch runs when all its tokens are in.
EXPERT_BATCH = 256
DISPATCH, COMBINE = 0, 1
#: What the record fields hold (record_type): token u4, expert u2, choice u1.
TOKENS_MAX, EXPERTS_MAX, TOP_K_MAX = 2**32 - 1, 1 << 16, 1 << 8
#: 64 records a datagram must stay an MPI int count of bytes: 64 * (8 + 4 * hidden) < 2**31.
HIDDEN_MAX = 1 << 20


#: The app's own receive and send pools (each rank), unless chosen.
RAIL_POOLS = {"recv_pool_slots": 64, "send_pool_slots": 32}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int_in(1, TOKENS_MAX), default=2048, help="tokens per rank (default 2048)")
    parser.add_argument(
        "--hidden", type=int_in(1, HIDDEN_MAX), default=1024, help=f"features per token, 1..{HIDDEN_MAX} (default 1024)"
    )
    parser.add_argument(
        "--experts",
        type=int_in(1, EXPERTS_MAX),
        default=None,
        help=f"experts in all, 1..{EXPERTS_MAX} (default: 4 per rank)",
    )
    parser.add_argument(
        "--top-k", type=int_in(1, TOP_K_MAX), default=2, help="experts per token, up to --experts (default 2)"
    )
    parser.add_argument(
        "--skew",
        type=float_in(0.0, 100.0),
        default=0.0,
        help="Zipf exponent of expert popularity, 0..100 (0: uniform)",
    )
    add_app_arguments(parser, {"datagram_size": "64 tokens' records (at --hidden)", **RAIL_POOLS})


def record_type(hidden: int) -> np.dtype:
    """One datagram record: a token's features going to an expert, or its result coming home."""
    return np.dtype(
        [("token", "<u4"), ("expert", "<u2"), ("choice", "u1"), ("kind", "u1"), ("features", "<f4", (hidden,))]
    )


class MixtureOfExperts:
    """One rank's tokens, gate decisions and experts (see the module doc)."""

    name = "moe"

    def __init__(self, comm: Any, args: argparse.Namespace) -> None:
        self.comm, self.rank, self.ranks = comm, comm.Get_rank(), comm.Get_size()
        self.hidden, self.top_k, self.skew, self.seed = args.hidden, args.top_k, args.skew, args.seed
        self.experts = experts_of(args, self.ranks)
        problem = shape_problem(args, self.ranks)
        if problem:
            raise ValueError(problem)
        rng = np.random.default_rng([args.seed, 1 + self.rank])
        self.tokens = rng.standard_normal((args.tokens, self.hidden), dtype=np.float32)
        self.choice, self.gate = self.route(rng, args.tokens)
        self.dtype = record_type(self.hidden)
        # Each (token, choice) result lands in its own row, so combining needs no scatter-add;
        # the gate-weighted sum is one einsum when every result is home.
        self.results = np.zeros((args.tokens, self.top_k, self.hidden), dtype=np.float32)
        self.output = np.zeros_like(self.tokens)
        self.rate = ("tokens_per_s", float(args.tokens * self.ranks))
        self.expected = self.local_reference()
        # A rank keeps only its own experts' weights (any rank can rebuild any expert from the seed).
        self.weights = {e: self.expert_weights(e) for e in range(self.rank, self.experts, self.ranks)}

    def route(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k distinct experts per token (Gumbel top-k over Zipf popularity) and their gate weights."""
        popularity = -self.skew * np.log(np.arange(1, self.experts + 1))
        keys = popularity + rng.gumbel(size=(count, self.experts))
        choice = np.argsort(-keys, axis=1)[:, : self.top_k].astype(np.uint16)
        logits = rng.standard_normal((count, self.top_k)).astype(np.float32)
        gate = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return choice, gate.astype(np.float32)

    def expert_weights(self, expert: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 1 << 20, expert])
        return rng.standard_normal((self.hidden, self.hidden), dtype=np.float32) / np.float32(np.sqrt(self.hidden))

    def local_reference(self) -> np.ndarray:
        """This rank's outputs computed here, one expert at a time (its weights built and dropped)."""
        expected = np.zeros_like(self.tokens)
        for expert in np.unique(self.choice).tolist():
            weights = self.expert_weights(expert)
            for k in range(self.top_k):
                rows = np.flatnonzero(self.choice[:, k] == expert)
                expected[rows] += self.gate[rows, k, None] * (self.tokens[rows] @ weights)
        return expected

    def dispatch_records(self) -> tuple[np.ndarray, np.ndarray]:
        """Destinations and records: every (token, choice) pair to its expert's rank, in expert order.

        Ordered by expert, a datagram carries one or two experts' tokens, and
        each expert's share of it is one slice.
        """
        pairs = np.argsort(self.choice.reshape(-1), kind="stable")  # radix sort of 16-bit experts
        records = np.empty(len(pairs), dtype=self.dtype)
        records["token"] = pairs // self.top_k
        records["choice"] = pairs % self.top_k
        records["expert"] = self.choice.reshape(-1)[pairs]
        records["kind"] = DISPATCH
        tokens, features = records["token"], records["features"]
        for start in range(0, len(records), 256):  # gathered in cache-sized pieces: faster than at once
            features[start : start + 256] = self.tokens[tokens[start : start + 256]]
        return records["expert"] % self.ranks, records

    def apply_expert(self, expert: int, records: np.ndarray) -> np.ndarray:
        """Expert *expert* on dispatched *records*: their results, as combine records (same order)."""
        results = np.empty(len(records), dtype=self.dtype)
        for field in ("token", "expert", "choice"):
            results[field] = records[field]
        results["kind"] = COMBINE
        np.matmul(records["features"], self.weights[expert], out=results["features"])
        return results

    def combine(self, records: np.ndarray) -> None:
        """Keep the expert results that came home, each in its (token, choice) row."""
        self.results[records["token"], records["choice"]] = records["features"]

    def sum_results(self) -> None:
        """Every token's output: its experts' results weighted by the gate."""
        np.einsum("tk,tkh->th", self.gate, self.results, out=self.output)

    def pairs_per_expert(self) -> np.ndarray:
        """Collective: how many (token, choice) pairs each expert receives from all ranks."""
        return self.comm.allreduce(np.bincount(self.choice.reshape(-1), minlength=self.experts))

    # -- MailRail: asynchronous dispatch and combine --------------------------

    def run_mailrail(self, rail: Rail) -> dict[str, Any]:
        from mailrail.coalesce import Coalescer  # MailRail starts MPI: imported when the run begins, not to parse flags

        self.results[:] = 0  # a result that never came home must not pass as the last trial's
        # The gate's counts, summed over ranks (as all_to_all_single's split sizes are exchanged):
        # an expert knows when its last batch is complete and runs it without waiting for a barrier.
        missing = {expert: int(n) for expert, n in enumerate(self.pairs_per_expert()) if expert in self.weights}
        # Dispatched tokens not yet through their expert: per expert, (source, records) pieces.
        queued: dict[int, list[tuple[int, np.ndarray]]] = {expert: [] for expert in self.weights}
        queued_rows = dict.fromkeys(self.weights, 0)

        def run_expert(expert: int) -> None:
            pieces = queued[expert]
            sources = np.repeat([source for source, _ in pieces], [len(r) for _, r in pieces])
            records = pieces[0][1] if len(pieces) == 1 else np.concatenate([r for _, r in pieces])
            queued[expert], queued_rows[expert] = [], 0  # what arrives while results leave is a new batch
            coalescer.send(sources, self.apply_expert(expert, records))

        def dispatched(source: int, expert: int, records: np.ndarray) -> None:
            missing[expert] -= len(records)
            queued_rows[expert] += len(records)
            last = missing[expert] == 0
            if queued_rows[expert] < EXPERT_BATCH and not last:
                records = records.copy()  # the datagram's buffer goes back to the pool
            queued[expert].append((source, records))
            if queued_rows[expert] >= EXPERT_BATCH or last:
                run_expert(expert)

        def arrived(source: int, records: np.ndarray) -> None:
            results = records["kind"] == COMBINE  # a datagram may carry both kinds
            if results.any():
                self.combine(records[results])
                records = records[~results]
            experts = records["expert"]
            starts = np.flatnonzero(np.diff(experts)) + 1  # records come in expert order
            for piece in np.split(records, starts) if len(records) else ():
                dispatched(source, int(piece["expert"][0]), piece)

        coalescer = Coalescer(rail, self.dtype, arrived)
        sent_before = rail.stats()["messages_sent"]
        coalescer.send(*self.dispatch_records())
        coalescer.barrier()  # every expert ran its last batch when its count was reached
        self.sum_results()
        return self.figures(1, rail.stats()["messages_sent"] - sent_before)

    # -- the peer: two Alltoallv exchanges ------------------------------------

    def run_alltoallv(self) -> dict[str, Any]:
        self.results[:] = 0
        dests, records = self.dispatch_records()
        arrived, incoming = exchange(self.comm, dests, records)
        results = np.empty_like(arrived)
        for expert in np.unique(arrived["expert"]).tolist():
            rows = np.flatnonzero(arrived["expert"] == expert)
            results[rows] = self.apply_expert(expert, arrived[rows])
        returned, _ = exchange(self.comm, np.repeat(np.arange(self.ranks), incoming), results)
        self.combine(returned)
        self.sum_results()
        return self.figures(1, 2 * (self.ranks - 1))

    def figures(self, rounds: int, messages: int) -> dict[str, Any]:
        pairs = len(self.tokens) * self.top_k
        return {
            "rounds": rounds,
            "messages": self.comm.allreduce(messages),
            "bytes": 2 * self.dtype.itemsize * self.comm.allreduce(pairs),
        }

    # -- checks ----------------------------------------------------------------

    def verify(self) -> bool:
        """Collective: every token's output equals the local computation (float32, rtol 1e-4)."""
        close = bool(np.allclose(self.output, self.expected, rtol=1e-4, atol=1e-4))
        from mailrail._mpi import MPI

        return bool(self.comm.allreduce(close, op=MPI.LAND))

    def load(self) -> list[int]:
        """Collective: token-expert pairs each rank's experts receive."""
        per_expert = self.pairs_per_expert()
        return [int(per_expert[rank :: self.ranks].sum()) for rank in range(self.ranks)]

    def workload(self) -> dict[str, Any]:
        return {
            "tokens_per_rank": len(self.tokens),
            "hidden": self.hidden,
            "experts": self.experts,
            "top_k": self.top_k,
            "skew": self.skew,
            "seed": self.seed,
            "pairs_per_rank_of_experts": self.load(),
        }

    def summary(self) -> dict[str, Any]:
        load = self.load()
        return {"hottest_rank": int(np.argmax(load))}


def experts_of(args: argparse.Namespace, ranks: int) -> int:
    return args.experts or 4 * ranks


def shape_problem(args: argparse.Namespace, ranks: int) -> str | None:
    """What the flags' ranges cannot say alone: top-k against the experts, the default experts' cap."""
    experts = experts_of(args, ranks)
    if experts > EXPERTS_MAX:
        return f"{ranks} ranks make {experts} experts (4 per rank), more than {EXPERTS_MAX}: give --experts"
    if args.top_k > experts:
        return f"argument --top-k: must be an integer in 1..{experts} (the experts), got '{args.top_k}'"
    return None


def run(args: argparse.Namespace) -> int:
    # 64 tokens a datagram (256 KiB at hidden 1024: with a few tokens a datagram the per-datagram work
    # dominates), with pools sized to match, unless chosen.
    rail_defaults = {
        "datagram_size": 64 * record_type(args.hidden).itemsize,
        **RAIL_POOLS,
    }
    checked = app_rail_options("moe", args, rail_defaults)
    if checked is None:
        return 2
    from mailrail._mpi import MPI

    comm = MPI.COMM_WORLD
    problem = shape_problem(args, comm.Get_size())
    if problem:  # the same on every rank: all return before any rank allocates
        return usage_error("app moe", problem, comm)
    # Tokens, their results (top-k each), output and reference; this rank's experts' weight matrices.
    floats = (
        args.tokens * args.hidden * (3 + args.top_k)
        + -(-experts_of(args, comm.Get_size()) // comm.Get_size()) * args.hidden**2
    )
    problem = memory_problem(
        comm, 4 * floats, f"--tokens {args.tokens}, --hidden {args.hidden} and --top-k {args.top_k}"
    )
    if problem:
        return usage_error("app moe", problem, comm)
    return run_app(comm, MixtureOfExperts(comm, args), args, *checked)
