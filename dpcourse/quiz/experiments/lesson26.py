"""Experiments for lesson 26 (HSDP): each starts 4 real gloo ranks and measures the answer.

All run ``sharded.hsdp.tour``, the lesson's own run: the model trained with HSDP on a (2, 2) mesh, with 1-D FSDP2
and with DDP, each one's first step recorded by process group. ``dpcourse.sharded`` is imported inside each
experiment, when it runs (it loads ``torch.distributed``).
"""

from ..outcome import Outcome, only_true


def _tour() -> list[dict]:
    from dpcourse.sharded import hsdp

    return hsdp.tour()


def rank_three_rows() -> Outcome:
    """HSDP on (2, 2): which rows of ``0.weight`` (16 rows of 8) each rank's shard holds, found by comparing."""
    from dpcourse.sharded import hsdp_tables

    results = _tour()
    rows = [tuple(result["rows"]) for result in results]
    value = only_true({
        "Rows 8 ... 15, the same rows as rank 1": rows[3] == rows[1] == (8, 16),
        "Rows 0 ... 7, the same rows as rank 2": rows[3] == rows[2] == (0, 8),
        "Rows 12 ... 15, its own quarter, as FSDP2 on 4 ranks would": rows[3] == (12, 16),
        "All 16 rows: ranks 2 and 3 are the replicas": rows[3] == (0, 16),
    })
    return Outcome(hsdp_tables.layout_table(results), value)


def replicate_collectives() -> Outcome:
    """HSDP's first step on rank 0: the collectives that ran on its replicate group, and on its shard group."""
    from dpcourse.sharded import hsdp_tables

    result = _tour()[0]
    kinds = set(result["traffic"]["replicate"]["calls"])
    value = only_true({
        "An all-reduce of each unit's gradient shard": kinds == {"all-reduce"},
        "All-gathers and reduce-scatters, as in the shard group": kinds == {"all-gather", "reduce-scatter"},
        "None: the replicas only meet when the model is saved": not kinds,
    })
    return Outcome("rank 0, the first step's collectives by group:\n" + hsdp_tables.dimension_lines(result), value)


def replicate_all_reduce_size() -> Outcome:
    """Per step on rank 0: the bytes all-reduced in HSDP's replicate group, against DDP's all-reduce."""
    from dpcourse.sharded import hsdp_tables

    results = _tour()
    hsdp_size = results[0]["traffic"]["replicate"]["size"]
    ddp_size = results[0]["DDP"]["traffic"]["all ranks"]["size"]
    value = only_true({
        "The same: every gradient, as DDP": hsdp_size == ddp_size,
        "A half: each rank's gradient shard": 2 * hsdp_size == ddp_size,
        "A quarter: one rank of 4": 4 * hsdp_size == ddp_size,
    })
    return Outcome(hsdp_tables.traffic_table(results) + "\n" + hsdp_tables.all_reduce_share(results), value)


def memory_per_rank() -> Outcome:
    """Per rank after training: parameters, gradients and Adam's state under DDP, HSDP (2, 2) and FSDP2 on 4."""
    from dpcourse.sharded import hsdp_tables

    results = _tour()
    held = {kind: sum(entry.values()) for kind, entry in hsdp_tables.held(results).items()}

    def about(ratio: float, target: float) -> bool:
        return abs(ratio - target) < 0.05 * target

    value = only_true({
        "As FSDP2's: both shard everything": held["HSDP"] == held["FSDP2"],
        "About half of DDP's and twice FSDP2's": about(held["DDP"] / held["HSDP"], 2) and about(
            held["HSDP"] / held["FSDP2"], 2),
        "As DDP's: the replicas hold everything": held["HSDP"] == held["DDP"],
    })
    return Outcome(hsdp_tables.memory_table(results) + "\n" + hsdp_tables.memory_ratios(results), value)


EXPERIMENTS = (rank_three_rows, replicate_collectives, replicate_all_reduce_size, memory_per_rank)
