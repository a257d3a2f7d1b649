"""Experiments for lesson 19 (ZeRO-2): each starts real ranks, trains DDP, ZeRO-1 and ZeRO-2 there, and measures.

See ``experiments`` for how an experiment reports its ``Outcome``. ``dpcourse.sharded`` is imported inside each
experiment, when it runs: importing it loads ``torch.distributed``, which ``import dpcourse.quiz`` in the lessons
before 10 should not pay for. ``zero2_measure.compare`` looks its programs up in ``zero2_measure.PROGRAMS`` when it
runs, so a test can plant another ZeRO-2 there.
"""

from ..outcome import Outcome, only_true

RANKS = 4


def wire_bytes_against_ddp() -> Outcome:
    """DDP, ZeRO-1 and ZeRO-2 on 4 gloo ranks with every collective a ring of sends: bytes each rank sent per step."""
    from dpcourse.sharded import zero2_measure

    compared = zero2_measure.compare(RANKS)
    ddp, zero2 = (max(compared.ranks_of(name, "wire")) for name in ("DDP", "ZeRO-2"))
    ratio = zero2 / ddp
    text = (f"{compared.bytes_table()}\n"
            f"ZeRO-2's busiest rank sent {zero2:,.0f} bytes per step, DDP's {ddp:,.0f}: {ratio:.3f} times as many.")
    value = only_true({
        "The same as DDP's, up to a few bytes of padding": abs(ratio - 1) < 0.01,
        "Half of DDP's: each rank receives only its shard of the gradient": abs(ratio - 0.5) < 0.05,
        "One and a half times DDP's: an all-gather on top of the gradients' collective": abs(ratio - 1.5) < 0.05,
    })
    return Outcome(text, value)


def gradient_bytes_after_backward() -> Outcome:
    """DDP and ZeRO-2 on 4 gloo ranks: the gradient bytes each rank holds when the first backward has ended."""
    from dpcourse.sharded import zero2_measure

    compared = zero2_measure.compare(RANKS)
    ddp, zero2 = (compared.ranks_of(name, "after_backward") for name in ("DDP", "ZeRO-2"))
    text = (f"gradient bytes held at the end of backward, rank by rank ({RANKS} ranks, {compared.backend}):\n"
            f"  DDP     {', '.join(f'{b:,}' for b in ddp)}\n  ZeRO-2  {', '.join(f'{b:,}' for b in zero2)}\n"
            f"ZeRO-2's largest is {max(zero2) / min(ddp):.3f} of DDP's.")
    value = only_true({
        "A quarter of DDP's: its shard of the averaged gradient": all(b <= min(ddp) / RANKS * 1.05 for b in zero2),
        "All of DDP's: every rank computed every gradient in backward": all(b >= min(ddp) for b in zero2),
        "Half of DDP's: the reduce-scatter's input is kept until the step": all(
            abs(b / min(ddp) - 0.5) < 0.1 for b in zero2),
    })
    return Outcome(text, value)


def first_reduce_scatter_during_backward() -> Outcome:
    """ZeRO-2 on 4 gloo ranks: how many gradients backward had still to produce when each bucket's reduce-scatter
    started, in the first step."""
    from dpcourse.sharded import zero2_measure

    compared = zero2_measure.compare(RANKS)
    still = compared.ranks_of("ZeRO-2", "still_to_come")
    text = ("gradients still to come when each bucket's reduce-scatter started, rank by rank:\n" + "\n".join(
        f"  rank {rank}: {', '.join(map(str, counts))}" for rank, counts in enumerate(still)))
    value = only_true({
        "During backward: the last layers' bucket is full before the first layers' gradients exist": all(
            counts and counts[0] > 0 for counts in still),
        "After backward: the bucket waits until every gradient exists": all(
            counts and not any(counts) for counts in still),
        "Not in backward at all: the gradients are reduce-scattered in the optimizer step": all(
            not counts for counts in still),
    })
    return Outcome(text, value)


EXPERIMENTS = (wire_bytes_against_ddp, gradient_bytes_after_backward, first_reduce_scatter_during_backward)
