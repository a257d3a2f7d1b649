"""Experiments for lesson 21 (fsdp2): each starts real gloo ranks and measures the answer.

Most run ``sharded.practice.tour``, the lesson's own run: the course's model trained with FSDP2 on 3 ranks (and
with DDP, with ZeroRedundancyOptimizer), saved with ``torch.distributed.checkpoint`` before its last step.
``dpcourse.sharded`` is imported inside each experiment, when it runs (it loads ``torch.distributed``).
"""

import tempfile

from ..outcome import Outcome, only_true


def _tour() -> list[dict]:
    from dpcourse.sharded import practice

    with tempfile.TemporaryDirectory(prefix="dpcourse-quiz21-") as directory:
        return practice.tour(directory)


def last_layer_on_three_ranks() -> Outcome:
    """FSDP2 on 3 ranks: the local shape of each rank's shard of ``4.weight`` (4 rows of 15)."""
    results = _tour()
    shapes = [next(p["local"] for p in result["layout"] if p["name"] == "4.weight") for result in results]
    text = (f"4.weight {next(p['shape'] for p in results[0]['layout'] if p['name'] == '4.weight')} on 3 ranks: "
            f"rank 0 holds {shapes[0]}, rank 1 {shapes[1]}, rank 2 {shapes[2]} "
            f"(placements {results[2]['layout'][4]['placements']})")
    value = only_true({
        "One row, (1, 15): the rows are split 2, 1, 1": shapes == [(2, 15), (1, 15), (1, 15)],
        "No rows, (0, 15): the rows are split 2, 2, 0": shapes == [(2, 15), (2, 15), (0, 15)],
        "Five columns, (4, 5): FSDP2 splits the last dimension": shapes == [(4, 5), (4, 5), (4, 5)],
    })
    return Outcome(text, value)


def gathers_per_step() -> Outcome:
    """One FSDP2 step with each Linear its own unit, ``reshard_after_forward`` True, then False: all-gathers."""
    results = _tour()
    counts = {}
    for flag, part in ((True, results[0]["step"]), (False, results[0]["kept"]["step"])):
        counts[flag] = sum(name.startswith("all_gather") for name in part["forward"] + part["backward"])
    text = (f"all-gathers in one step, rank 0: {counts[True]} with reshard_after_forward=True, {counts[False]} with "
            f"False. Full parameters held when the backward starts: {results[0]['step']['held_after_forward']} "
            f"bytes with True, {results[0]['kept']['step']['held_after_forward']} bytes with False")
    value = only_true({
        "6 with True, 3 with False: True gathers each layer again for the backward": (counts[True], counts[False])
        == (6, 3),
        "3 with both: the flag only decides when the full parameters are freed": counts[True] == counts[False] == 3,
        "3 with True, 6 with False": (counts[True], counts[False]) == (3, 6),
    })
    return Outcome(text, value)


def checkpoint_on_fewer_ranks() -> Outcome:
    """Save FSDP2's model and Adam on 3 ranks after step 3 (``dcp.save``), load both on 2 ranks into a model of
    zeros, run step 4; compare with the 3-rank run's own step 4."""
    from dpcourse import ranks
    from dpcourse.sharded import practice

    with tempfile.TemporaryDirectory(prefix="dpcourse-quiz21-") as directory:
        saved = practice.tour(directory)
        try:
            resumed, error = practice.resume(directory, world_size=2), None
        except Exception as failure:  # the question asks whether loading fails: any failure is the answer
            resumed, error = None, f"{type(failure).__name__}: {str(failure).splitlines()[0]}"
    difference = None if error else ranks.first_difference(resumed, saved[0]["parameters"])
    if error:
        text = f"loading on 2 ranks raised {error}"
    else:
        text = (f"loaded on 2 ranks: local shapes of rank 0 {resumed[0]['local']}; after step 4, "
                + (difference or "every parameter equals the 3-rank run's after its step 4"))
    value = only_true({
        "`dcp.load` raises: a checkpoint written by 3 ranks needs 3 ranks to read it": error is not None,
        "Each rank reads the rows it now owns, whichever files hold them; step 4 gives the same weights": (
            error is None and difference is None),
        "It loads the weights but not Adam's state: step 4 gives other weights": error is None and bool(difference),
    })
    return Outcome(text, value)


def zero_redundancy_owners() -> Outcome:
    """DDP with ``ZeroRedundancyOptimizer(Adam)`` on 3 ranks: the parameters each rank's Adam holds."""
    results = _tour()
    owned = [result["zero"]["owned"] for result in results]
    text = "\n".join(f"rank {rank}'s Adam holds {names}: {result['zero']['state_bytes']} bytes of state"
                     for rank, (names, result) in enumerate(zip(owned, results, strict=True)))
    names = [p["name"] for p in results[0]["layout"]]
    value = only_true({
        "Every parameter cut into 3 slices, one per rank, as lesson 18's ZeRO-1": all(o == names for o in owned),
        "Whole parameters: rank 0 owns 2.weight alone, rank 1 0.weight, rank 2 the other four": owned == [
            ["2.weight"], ["0.weight"], ["4.weight", "0.bias", "2.bias", "4.bias"]],
        "Whole parameters, two per rank in the model's order": owned == [names[0:2], names[2:4], names[4:6]],
    })
    return Outcome(text, value)


def mixed_precision_dtypes() -> Outcome:
    """One FSDP2 step under ``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` on 2 CPU ranks."""
    from dpcourse.sharded import practice

    try:
        dtypes, error = practice.mixed_precision(world_size=2), None
    except Exception as failure:  # the question asks whether it runs on the CPU at all
        dtypes, error = {}, f"{type(failure).__name__}: {str(failure).splitlines()[0]}"
    text = f"raised {error}" if error else "\n".join(f"{name}: {dtype}" for name, dtype in dtypes.items())
    stored = (dtypes.get("stored shard"), dtypes.get("gradient"))
    value = only_true({
        "float32 for both: bfloat16 is only the gathered copy that the forward and backward use": (
            stored == ("float32", "float32") and dtypes.get("weight inside the forward") == "bfloat16"),
        "bfloat16 for both: the policy converts the model": stored == ("bfloat16", "bfloat16"),
        "It raises: a mixed-precision policy needs a GPU": error is not None,
    })
    return Outcome(text, value)


EXPERIMENTS = (last_layer_on_three_ranks, gathers_per_step, checkpoint_on_fewer_ranks, zero_redundancy_owners,
               mixed_precision_dtypes)
