"""Experiments for lesson 18 (ZeRO-1): each starts real ranks and measures the answer.

See ``experiments`` for how an experiment reports its ``Outcome``. ``dpcourse.sharded`` is imported inside each
experiment, when it runs: importing it loads ``torch.distributed``, which ``import dpcourse.quiz`` in the lessons
before 10 should not pay for. Each looks its program up on ``zero1`` when it runs, so a test can plant another.
"""

from ...examples import max_difference
from ..outcome import Outcome, only_true


def ddp_state_per_rank() -> Outcome:
    """torch's DDP with Adam on 4 ranks (gloo on CPUs here), 3 steps: Adam's state bytes on each rank, and on one
    device training the same model."""
    from dpcourse import ranks
    from dpcourse.sharded import zero1

    on_ranks = ranks.train_on_ranks(zero1.ddp_program, 4)
    per_rank = [result["optimizer_state_bytes"] for result in on_ranks]
    one = zero1.one_device_state_bytes()
    text = (f"Adam's state on one device: {one:,} bytes\n"
            f"on each of 4 DDP ranks ({on_ranks[0]['backend']}): {', '.join(f'{b:,}' for b in per_rank)} bytes; "
            f"{sum(per_rank):,} bytes over the 4 ranks, {sum(per_rank) / one:g} times one device's")
    value = only_true({
        "All of it on every rank: 4 identical copies in all": per_rank == [one] * 4,
        "A quarter on each rank: DDP splits the optimizer state": all(b < one / 2 for b in per_rank),
        "All of it on rank 0, none on the others: only rank 0 steps": per_rank[0] == one and not any(per_rank[1:]),
    })
    return Outcome(text, value)


def unpadded_all_gather() -> Outcome:
    """4 gloo ranks, shards of the course model's 439 parameters (110, 110, 110, 109): each calls ``dist.all_gather``
    with its own shard and a receiving piece of each rank's true size."""
    from dpcourse.sharded import zero1

    try:
        answers = zero1.uneven_all_gather(4)
    except TimeoutError as error:
        answers, waited = [], str(error)
    else:
        waited = ""
    errors = [answer["error"] for answer in answers]
    worked = [answer["error"] is None and answer["gathered"].numel() == sum(answer["sizes"]) for answer in answers]
    text = (f"shard sizes {answers[0]['sizes']}\n" if answers else waited) + "\n".join(
        f"rank {rank}: " + (f"received all the shards, {answers[rank]['gathered'].numel()} numbers"
                            if ok else f"raised RuntimeError: {error}")
        for rank, (ok, error) in enumerate(zip(worked, errors, strict=True)))
    value = only_true({
        "It works: each rank receives pieces of the sizes it asked for": bool(answers) and all(worked),
        "It raises: every piece must have the size of the rank's own input": bool(answers) and all(
            error and "size" in error for error in errors),
        "The ranks wait for each other until the timeout": bool(waited),
    })
    return Outcome(text, value)


def sum_instead_of_mean() -> Outcome:
    """ZeRO-1 on 4 ranks whose all-reduced gradients are not divided by 4 (summed, not averaged), 3 steps of
    Adam with lr 0.01, next to one-device Adam on the whole batch: the largest weight difference."""
    from dpcourse import ranks
    from dpcourse.sharded import zero1

    lr = 1e-2
    summed = ranks.train_on_ranks(zero1.zero1_program, 4, lr=lr, extra={"average": False})
    expected = ranks.one_device(lr=lr)
    gap = max_difference(summed[0]["parameters"], expected)
    text = (f"largest weight difference from one-device Adam after 3 steps: {gap:.3g}\n"
            f"Adam moves a weight by about lr = {lr:g} per step: the difference is {gap / lr:.2g} of one step")
    value = only_true({
        "About 4 times too far: each step is as large as 4 steps": gap > lr,
        "A tiny difference, far less than one step: Adam divides the step by the gradient's size": 0 < gap < lr / 100,
        "None at all, bit for bit": gap == 0,
    })
    return Outcome(text, value)


EXPERIMENTS = (ddp_state_per_rank, unpadded_all_gather, sum_instead_of_mean)
