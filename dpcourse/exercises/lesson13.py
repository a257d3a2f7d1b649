"""Lesson 13's exercises: two all-reduces written with send and recv, run on real ranks next to dist.all_reduce;
the bytes a ring and reduce-then-broadcast send; and which pieces a reduce leaves untouched.

Each case starts 2, 3 or 4 ranks (``dpcourse.ranks.learner.run_on_ranks``): the learner's function travels there
as its source, runs on rank r's tensor, and is judged on every rank's result (against ``dist.all_reduce``), on
the collectives it called (none allowed), and on the bytes each rank sent, counted.
"""

import math

import torch

from dpcourse.ranks import learner

from ..ui.words import plural
from .check import Case, Exercise, equals, first_difference

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



RING_AND_RANK0 = Exercise(
    name="ring_and_rank0",
    task="Write ring_and_rank0(n, nbytes): for an all-reduce of nbytes bytes on n ranks, the bytes each rank sends "
         "in a ring all-reduce, and the bytes rank 0 sends in reduce-then-broadcast, as a pair.",
    cases=lambda: [
        Case("100 MB on 8 ranks", (8, 100_000_000),
             "a ring sends 2 (n - 1) pieces of nbytes / n; rank 0 sends the whole sum to every other rank"),
        Case("12 bytes on 2 ranks", (2, 12)),
        Case("one rank", (1, 64), "alone, a rank sends nothing"),
    ],
    judge=equals(lambda n, nbytes: (2 * (n - 1) * nbytes / n, (n - 1) * nbytes)),
    generated=lambda: [Case(f"{plural(nbytes, 'byte')} on {plural(n, 'rank')}", (n, nbytes))
                       for n in range(1, 9) for nbytes in (4, 1000, 4 * 25_000_000)],
)


def _reduce_on_3_ranks() -> list[list[tuple[int, ...]]]:
    """``after_from`` of a reduce to rank 0 over a ring of 3 ranks, each tensor in 3 pieces: rank 0 holds every
    rank's values; the others hold what passed through them, some pieces untouched."""
    return [[(0, 1, 2), (0, 1, 2), (0, 1, 2)], [(1,), (1, 2), (0, 1)], [(0, 2), (2,), (2,)]]


OWN_PIECES = Exercise(
    name="own_pieces",
    task="Write own_pieces(after_from, rank): the pieces of rank `rank`'s tensor that still hold only its own values "
         "after a collective, where after_from[rank][piece] is the tuple of ranks whose values that piece holds "
         "(as moved[\"reduce\"].after_from).",
    cases=lambda: [
        Case("rank 2 after a reduce on 3 ranks", (_reduce_on_3_ranks(), 2),
             "a piece that holds rank 2's values and another rank's is a partial sum, not rank 2's own"),
        Case("rank 1 after a reduce on 3 ranks", (_reduce_on_3_ranks(), 1)),
        Case("rank 0 after a reduce on 3 ranks", (_reduce_on_3_ranks(), 0), "rank 0 holds the sum everywhere"),
        Case("rank 1 of 2, a piece from rank 0", ([[(0,), (0,)], [(0,), (1,)]], 1),
             "a piece holding only another rank's values is not rank 1's own either"),
    ],
    judge=equals(lambda after_from, rank: [piece for piece, ranks in enumerate(after_from[rank]) if ranks == (rank,)]),
)

EXERCISES = (REDUCE_THEN_BROADCAST, RING_ALL_REDUCE_ON_RANKS, RING_AND_RANK0, OWN_PIECES)
