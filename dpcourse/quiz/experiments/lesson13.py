"""Experiments for lesson 13 (collectives): each starts real ranks on gloo and measures the answer.

See ``experiments`` for how an experiment reports its ``Outcome``. ``dpcourse.ddp`` is imported inside each
experiment, when it runs: importing it loads ``torch.distributed``, which ``import dpcourse.quiz`` in the
lessons before 10 should not pay for.
"""

from ..outcome import Outcome, only_true

WAIT = 3.0  # seconds: the ranks of the blocking version are stopped after this long


def blocking_sends_wait() -> Outcome:
    """3 gloo ranks each ``dist.send`` 10 values to the right, then ``dist.recv`` from the left; then with ``isend``."""
    from dpcourse.ddp import RankError
    from dpcourse.ddp.demos import pointtopoint

    try:
        received, what = pointtopoint.pass_right(3, blocking=True, timeout=WAIT, backend="gloo"), "finished"
    except TimeoutError:
        received, what = None, "waited"
    except RankError as error:
        received, what = None, f"failed: {str(error).splitlines()[-1]}"
    with_isend = pointtopoint.pass_right(3, blocking=False, backend="gloo")
    text = (
        f"dist.send, then dist.recv, on all 3 ranks: {what}"
        + (f", each rank received rank {received}" if received else f" (still waiting after {WAIT:g} s, stopped)")
        + f"\ndist.isend, then dist.recv, then request.wait(): each rank received its left neighbour's number "
        f"{with_isend} (rank 0 from rank 2, rank 1 from rank 0, rank 2 from rank 1)"
    )
    value = only_true({
        "Every rank receives its left neighbour's tensor": what == "finished",
        "They wait, until the process group's timeout: each send waits for a recv its neighbour never reaches": (
            what == "waited"
        ),
        "gloo raises an error at once: two ranks may not send at the same time": what.startswith("failed"),
    })
    return Outcome(text, value)


def reduce_leaves_partial_sums() -> Outcome:
    """``dist.reduce(x, dst=0)`` on 3 gloo ranks; compare rank 2's tensor afterwards with its input and the sum."""
    from dpcourse.ddp.demos import collectives

    moved = collectives.collectives(3, ("reduce",), backend="gloo")["reduce"]
    before, after, total = moved.before[2], moved.after[2], moved.after[0]
    text = (
        f"{moved}\n"
        f"rank 2 before {before}, after {after}; the sum, on rank 0: {total}\n"
        f"rank 2's tensor afterwards is made of ranks {sorted(set(moved.after_from[2]))}' inputs"
    )
    value = only_true({
        "Its own values, unchanged: only rank 0's tensor is written": after == before,
        "The same sum as rank 0's": after == total,
        "Neither: torch leaves it undefined, and gloo left partial sums in it": after not in (before, total),
    })
    return Outcome(text, value)


def ring_bytes_as_ranks_grow() -> Outcome:
    """Ring all-reduce of 4,800 bytes on 2 and on 4 ranks: the bytes every rank sent, counted."""
    from dpcourse.ddp.demos import compare

    nbytes = 4_800
    runs = compare.compare(numels=(nbytes // 4,), world_sizes=(2, 4), repeats=1)
    on_2, on_4 = (max(runs.find("ring", n, nbytes).sent) for n in (2, 4))
    text = (
        f"ring all-reduce of S = {nbytes:,} bytes: on 2 ranks each rank sent {on_2:,} bytes ({on_2 / nbytes:g} S), "
        f"on 4 ranks {on_4:,} bytes ({on_4 / nbytes:g} S).\n"
        "2(n - 1) pieces of S / n each: 2(n - 1)/n * S, which approaches 2 S and never reaches it."
    )
    value = only_true({
        "They double: each rank exchanges pieces with twice as many ranks": on_4 == 2 * on_2,
        "They grow from S to 1.5 S, and stay below 2 S for any number of ranks": (on_2, on_4) == (nbytes, 1.5 * nbytes),
        "They halve: the pieces are half as big": 2 * on_4 == on_2,
    })
    return Outcome(text, value)


EXPERIMENTS = (blocking_sends_wait, reduce_leaves_partial_sums, ring_bytes_as_ranks_grow)
