"""Lesson 13's exercises: two all-reduces written with send and recv, run on real ranks next to dist.all_reduce.

Each case starts 2, 3 or 4 ranks (``dpcourse.ranks.learner.run_on_ranks``): the learner's function travels there
as its source, runs on rank r's tensor, and is judged on every rank's result (against ``dist.all_reduce``), on
the collectives it called (none allowed), and on the bytes each rank sent, counted.
"""

import math

import torch

from dpcourse.ranks import learner

from .check import Case, Exercise, first_difference

SLOW = (f"starting the ranks (a few seconds); ranks that wait for each other are stopped after "
        f"{learner.TIMEOUT:g} s")


def _tensors(seed: int, n: int, *shape: int) -> list[torch.Tensor]:
    """Rank r's tensor for each of ``n`` ranks: small whole numbers, so every sum is exact and reads easily."""
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(-9, 10, shape, generator=generator).float() for _ in range(n)]


def _on_ranks(function, case: Case) -> list[dict]:
    (tensors,) = case.args
    return learner.run_on_ranks(function, tensors, timeout=learner.TIMEOUT)  # the limit SLOW names


def _sums_with_messages(answer: list[dict]) -> str | None:
    """The first rank that called a collective or ended with another tensor than dist.all_reduce's."""
    for rank, ranks_answer in enumerate(answer):
        if ranks_answer["collectives"]:
            return (f"rank {rank} called dist.{ranks_answer['collectives'][0]}: write the all-reduce with "
                    "point-to-point messages only (dist.isend, dist.send, dist.recv, dist.irecv)")
    for rank, ranks_answer in enumerate(answer):
        difference = first_difference(ranks_answer["expected"], ranks_answer["result"], f"rank {rank}'s tensor")
        if difference:
            return difference + " (dist.all_reduce gives every rank the sum of all ranks' tensors, in place)"
    return None


def _size(case: Case) -> tuple[int, int, int]:
    """The number of ranks, the tensor's bytes S and its number of values."""
    (tensors,) = case.args
    return len(tensors), tensors[0].numel() * tensors[0].element_size(), tensors[0].numel()


def _judge_reduce_then_broadcast(case: Case, answer: list[dict]) -> str | None:
    wrong = _sums_with_messages(answer)
    if wrong:
        return wrong
    n, nbytes, _ = _size(case)
    expected = [(n - 1) * nbytes] + [nbytes] * (n - 1)
    sent = [ranks_answer["sent"] for ranks_answer in answer]
    if sent != expected:
        return (f"bytes sent by each rank: expected {expected}, got {sent}. Each other rank sends its tensor "
                f"({nbytes} bytes) to rank 0 once; rank 0 sends the sum back to each of them")
    return None


def _judge_ring(case: Case, answer: list[dict]) -> str | None:
    wrong = _sums_with_messages(answer)
    if wrong:
        return wrong
    n, nbytes, numel = _size(case)
    sent = [ranks_answer["sent"] for ranks_answer in answer]
    largest_piece = math.ceil(numel / n) * nbytes // numel
    if sum(sent) != 2 * (n - 1) * nbytes or max(sent) > 2 * (n - 1) * largest_piece:
        return (f"bytes sent by each rank: {sent}. In a ring every rank sends 2(n - 1) = {2 * (n - 1)} pieces "
                f"of about S / n = {nbytes / n:.4g} bytes, 2(n - 1)/n * S = {2 * (n - 1) * nbytes / n:.4g} bytes "
                "in all: cut the tensor into n pieces and send one piece per step")
    return None


REDUCE_THEN_BROADCAST = Exercise(
    name="reduce_then_broadcast",
    task="Write reduce_then_broadcast(tensor), run on every rank: every rank but 0 sends its tensor to rank 0, "
         "which adds them into its own and sends the sum back. Afterwards every rank's tensor holds the sum, in "
         "place, as after dist.all_reduce(tensor). Use dist.send, dist.recv and dist.isend only.",
    cases=lambda: [
        Case("3 ranks, 5 values", (_tensors(1, 3, 5),),
             "rank 0 receives from rank 1 and from rank 2, each into a new tensor (torch.empty_like), and adds"),
        Case("4 ranks, a 2 x 3 matrix", (_tensors(2, 4, 2, 3),),
             "dist.recv(tensor, src=0) writes the sum into the rank's own tensor"),
    ],
    judge=_judge_reduce_then_broadcast,
    call=_on_ranks,
    slow=SLOW,
)

RING_ALL_REDUCE_ON_RANKS = Exercise(
    name="ring_all_reduce_on_ranks",
    task="Write ring_all_reduce_on_ranks(tensor), run on every rank: sum the tensor over all ranks in place, as "
         "dist.all_reduce(tensor) does, with a ring: cut it into n pieces (tensor.view(-1).tensor_split(n)); "
         "n - 1 reduce-scatter steps, each sending one piece to rank + 1 and adding the piece from rank - 1; "
         "then n - 1 all-gather steps passing the finished pieces on. Point-to-point messages only.",
    cases=lambda: [
        Case("2 ranks, 8 values", (_tensors(3, 2, 8),),
             "each step: request = dist.isend(piece, right); dist.recv(incoming, left); request.wait()"),
        Case("3 ranks, 7 values (pieces of 3, 2, 2)", (_tensors(4, 3, 7),),
             "at reduce-scatter step s, rank r sends piece (r - s) % n and adds the incoming one into piece "
             "(r - s - 1) % n; after n - 1 steps it holds the finished piece (r + 1) % n"),
        Case("4 ranks, a 3 x 5 matrix", (_tensors(5, 4, 3, 5),),
             "all-gather step s: send piece (r + 1 - s) % n, receive piece (r - s) % n straight into the tensor"),
        Case("3 ranks, 4 values (pieces of 2, 1, 1)", (_tensors(6, 3, 4),),
             "tensor_split(n) always gives n pieces; chunk(n) cuts pieces of ceil(4 / 3) = 2 values: only 2 of them"),
    ],
    judge=_judge_ring,
    call=_on_ranks,
    slow=SLOW,
)

EXERCISES = (REDUCE_THEN_BROADCAST, RING_ALL_REDUCE_ON_RANKS)
