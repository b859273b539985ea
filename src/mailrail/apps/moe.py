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

from mpi4py import MPI

from ..bench.common import alltoallv_exchange as exchange
from .frame import add_app_arguments, run_app

#: Tokens an expert collects before it multiplies them (and what it has when dispatch ends).
EXPERT_BATCH = 256
DISPATCH, COMBINE = 0, 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per rank (default 2048)")
    parser.add_argument("--hidden", type=int, default=1024, help="features per token (default 1024)")
    parser.add_argument("--experts", type=int, default=None, help="experts in all (default: 4 per rank)")
    parser.add_argument("--top-k", type=int, default=2, help="experts per token (default 2)")
    parser.add_argument("--skew", type=float, default=0.0, help="Zipf exponent of expert popularity (0: uniform)")
    add_app_arguments(parser)


def record_type(hidden: int) -> np.dtype:
    """One datagram record: a token's features going to an expert, or its result coming home."""
    return np.dtype([("token", "<u4"), ("expert", "<u2"), ("choice", "u1"), ("kind", "u1"),
                     ("features", "<f4", (hidden,))])


class MixtureOfExperts:
    """One rank's tokens, gate decisions and experts (see the module doc)."""

    name = "moe"

    def __init__(self, comm: Any, args: argparse.Namespace) -> None:
        self.comm, self.rank, self.ranks = comm, comm.Get_rank(), comm.Get_size()
        self.hidden, self.top_k, self.skew, self.seed = args.hidden, args.top_k, args.skew, args.seed
        self.experts = args.experts or 4 * self.ranks
        if not 1 <= self.top_k <= self.experts or self.experts > 1 << 16 or args.tokens < 1 or self.hidden < 1:
            raise SystemExit(f"app moe: need tokens, hidden >= 1 and 1 <= top-k ({self.top_k}) <= experts "
                             f"({self.experts}) <= 65536")
        rng = np.random.default_rng([args.seed, 1 + self.rank])
        self.tokens = rng.standard_normal((args.tokens, self.hidden), dtype=np.float32)
        self.choice, self.gate = self.route(rng, args.tokens)
        self.dtype = record_type(self.hidden)
        self.output = np.zeros_like(self.tokens)
        self.rate = ("tokens_per_s", float(args.tokens * self.ranks))
        self.expected = self.local_reference()
        # A rank keeps only its own experts' weights (any rank can rebuild any expert from the seed).
        self.weights = {e: self.expert_weights(e) for e in range(self.rank, self.experts, self.ranks)}

    def route(self, rng: np.random.Generator, count: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k distinct experts per token (Gumbel top-k over Zipf popularity) and their gate weights."""
        popularity = -self.skew * np.log(np.arange(1, self.experts + 1))
        keys = popularity + rng.gumbel(size=(count, self.experts))
        choice = np.argsort(-keys, axis=1)[:, :self.top_k].astype(np.uint16)
        logits = rng.standard_normal((count, self.top_k)).astype(np.float32)
        gate = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        return choice, gate.astype(np.float32)

    def expert_weights(self, expert: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, 1 << 20, expert])
        return (rng.standard_normal((self.hidden, self.hidden), dtype=np.float32) / np.sqrt(self.hidden))

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
        """Destinations and records: every (token, choice) pair to its expert's rank."""
        records = np.empty(len(self.tokens) * self.top_k, dtype=self.dtype)
        records["token"] = np.repeat(np.arange(len(self.tokens), dtype=np.uint32), self.top_k)
        records["choice"] = np.tile(np.arange(self.top_k, dtype=np.uint8), len(self.tokens))
        records["expert"] = self.choice.reshape(-1)
        records["kind"] = DISPATCH
        records["features"] = np.repeat(self.tokens, self.top_k, axis=0)
        return records["expert"] % self.ranks, records

    def apply_experts(self, records: np.ndarray) -> np.ndarray:
        """Run the experts on dispatched *records*; the results, as combine records (same order)."""
        results = records.copy()
        results["kind"] = COMBINE
        for expert in np.unique(records["expert"]).tolist():
            rows = np.flatnonzero(records["expert"] == expert)
            results["features"][rows] = records["features"][rows] @ self.weights[expert]
        return results

    def combine(self, records: np.ndarray) -> None:
        """Add the gate-weighted expert results to their tokens' outputs."""
        tokens, choices = records["token"], records["choice"]
        np.add.at(self.output, tokens, self.gate[tokens, choices, None] * records["features"])

    # -- MailRail: asynchronous dispatch and combine --------------------------

    def run_mailrail(self, rail: Any) -> dict[str, Any]:
        from ..coalesce import Coalescer

        self.output[:] = 0
        waiting: list[tuple[int, np.ndarray]] = []  # dispatched tokens not yet through their expert

        def run_waiting() -> None:
            if not waiting:
                return
            sources = np.concatenate([np.full(len(r), source) for source, r in waiting])
            records = np.concatenate([r for _, r in waiting])
            waiting.clear()  # sending receives too, and what arrives meanwhile waits for the next batch
            coalescer.send(sources, self.apply_experts(records))

        def arrived(source: int, records: np.ndarray) -> None:
            dispatched = records["kind"] == DISPATCH  # a datagram may carry both kinds
            if not dispatched.all():
                self.combine(records[~dispatched])
            if dispatched.any():
                waiting.append((source, records[dispatched].copy()))
                if sum(len(r) for _, r in waiting) >= EXPERT_BATCH:
                    run_waiting()

        coalescer = Coalescer(rail, self.dtype, arrived)
        sent_before = rail.stats()["messages_sent"]
        coalescer.send(*self.dispatch_records())
        rounds = 0
        while True:  # the last partial batches of the experts leave after a barrier
            rounds += 1
            coalescer.barrier()
            had_work = bool(waiting)
            run_waiting()
            if not self.comm.allreduce(had_work, op=MPI.LOR):
                break
        return self.figures(rounds, rail.stats()["messages_sent"] - sent_before)

    # -- the peer: two Alltoallv exchanges ------------------------------------

    def run_alltoallv(self) -> dict[str, Any]:
        self.output[:] = 0
        dests, records = self.dispatch_records()
        arrived, incoming = exchange(self.comm, dests, records)
        results = self.apply_experts(arrived)
        returned, _ = exchange(self.comm, np.repeat(np.arange(self.ranks), incoming), results)
        self.combine(returned)
        return self.figures(1, 2 * (self.ranks - 1))

    def figures(self, rounds: int, messages: int) -> dict[str, Any]:
        pairs = len(self.tokens) * self.top_k
        return {"rounds": rounds, "messages": self.comm.allreduce(messages),
                "bytes": 2 * self.dtype.itemsize * self.comm.allreduce(pairs)}

    # -- checks ----------------------------------------------------------------

    def verify(self) -> bool:
        """Collective: every token's output equals the local computation (float32, rtol 1e-4)."""
        close = bool(np.allclose(self.output, self.expected, rtol=1e-4, atol=1e-4))
        return bool(self.comm.allreduce(close, op=MPI.LAND))

    def load(self) -> list[int]:
        """Token-expert pairs each rank's experts receive."""
        mine = np.bincount((self.choice.reshape(-1) % self.ranks).astype(np.intp), minlength=self.ranks)
        return self.comm.allreduce(mine).tolist()

    def workload(self) -> dict[str, Any]:
        return {"tokens_per_rank": len(self.tokens), "hidden": self.hidden, "experts": self.experts,
                "top_k": self.top_k, "skew": self.skew, "seed": self.seed, "pairs_per_rank_of_experts": self.load()}

    def summary(self) -> dict[str, Any]:
        load = self.load()
        return {"hottest_rank": int(np.argmax(load))}


def run(args: argparse.Namespace) -> int:
    comm = MPI.COMM_WORLD
    app = MixtureOfExperts(comm, args)
    # A datagram holds several tokens unless the user chose its size.
    return run_app(comm, app, args, rail_defaults={"datagram_size": 8 * app.dtype.itemsize})
