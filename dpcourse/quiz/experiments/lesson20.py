"""Experiments for lesson 20 (ZeRO-3): each trains the course's model on 2 gloo ranks and measures the answer.

All three call ``sharded.zero3_measure.measure``, which trains DDP and ZeRO-3 side by side in one launch of the
ranks, counts the bytes each rank sends in one step and profiles its memory over that step. ``dpcourse.sharded``
is imported when an experiment runs, as ``dpcourse.ddp`` is in lesson 13's.
"""

from ..outcome import Outcome, only_true


def _rank_0(world_size: int = 2) -> dict:
    from dpcourse.sharded import zero3_measure

    return zero3_measure.measure(world_size)[0]["ways"]


def held_after_forward() -> Outcome:
    """After ZeRO-3's forward, the bytes each layer's gathered vector still holds on rank 0, against its shard's."""
    zero3 = _rank_0()["ZeRO-3"]
    held, shards = zero3["held_after_forward"], zero3["shard_bytes"]
    whole = [4 * numel for numel in zero3["numels"]]
    text = (f"rank 0 of 2, after the forward, per layer: the gathered vector holds {held} bytes; the layer's whole "
            f"parameters are {whole} bytes; rank 0's shard {shards} bytes, kept for the optimizer.")
    value = only_true({
        "Its whole parameters, until backward has used them": all(h >= w for h, w in zip(held, whole, strict=True)),
        "Only its own shard: the gathered copy's memory is given back, and backward gathers it again": (
            not any(held) and all(shards)),
        "Nothing: its shard goes back to the other ranks too": not any(held) and not any(shards),
    })
    return Outcome(text, value)


def bytes_against_ddp() -> Outcome:
    """Bytes rank 0 sends in one step, ZeRO-3 against DDP, both with ring collectives counted by traffic.counted."""
    ways = _rank_0()
    ddp, zero3 = ways["DDP"]["step_sent"], ways["ZeRO-3"]["step_sent"]
    ratio = zero3 / ddp
    text = (f"one step on 2 ranks, bytes rank 0 sent: DDP (ring all-reduce) {ddp:,}, ZeRO-3 (two ring all-gathers "
            f"and a ring reduce-scatter per layer) {zero3:,}: {ratio:.3f} times DDP's.")
    value = only_true({
        "The same as DDP: reduce-scatter plus all-gather is an all-reduce": abs(ratio - 1) < 0.05,
        "About 1.5 times DDP's": abs(ratio - 1.5) < 0.05,
        "About 3 times DDP's: three collectives for its one": abs(ratio - 3) < 0.1,
    })
    return Outcome(text, value)


def prefetch_peak() -> Outcome:
    """Rank 0's peak over one step, ZeRO-3 with and without prefetching the next layer, from the profiler."""
    from dpcourse.viz.zero3 import zero3_memory

    ways = _rank_0()
    shown = {way: ways[way] for way in ("DDP", "ZeRO-3", "ZeRO-3, prefetch")}
    plain, early = (max(ways[way]["allocated"]) for way in ("ZeRO-3", "ZeRO-3, prefetch"))
    layer = max(4 * 2 * -(-numel // 2) for numel in ways["ZeRO-3"]["numels"])  # the largest gathered copy, padded
    text = (f"rank 0 of 2, the allocator's peak over one step: ZeRO-3 {plain:,} bytes, with prefetch {early:,} bytes "
            f"({early - plain:+,}; the largest layer's gathered copy is {layer:,} bytes).")
    value = only_true({
        # one more gathered layer at a time: the rise is at most its bytes; a larger rise is something else
        "Higher: the next layer is gathered while the current one is still whole": plain < early <= plain + layer,
        "The same: the next layer is gathered anyway": early == plain,
        "Lower: the gather is over sooner": early < plain,
    })
    return Outcome(text, value, zero3_memory(shown))


EXPERIMENTS = (held_after_forward, bytes_against_ddp, prefetch_peak)
