"""Experiments for lesson 22 (hangs): each starts 2 real gloo ranks and watches rank 1 go wrong at step 1.

They run ``faults.hang_runs.run``: the ranks' 3 all-reduces of a 4-number gradient (``faults.hangs.train_steps``)
on groups with a 2-second timeout, rank 1 skipping one, calling a broadcast instead, or giving 5 numbers. Each
reads what every rank raised, when, and what came back. ``dpcourse.faults`` is imported when an experiment runs.
"""

from ..outcome import Outcome, only_true


def _run(faults: tuple[str, ...], detail: tuple[str, ...] = ()):
    from dpcourse.faults import hang_runs

    return hang_runs.run(faults, detail=detail)


def skipped_all_reduce() -> Outcome:
    """Rank 1 skips step 1's all-reduce, without DETAIL: what each rank raised, at which step, and its sums."""
    from dpcourse.faults import hang_runs

    run = _run(("skip",))
    first, second = (outcomes["skip"] for outcomes in run.outcomes)
    mixed = len(first["sums"]) > 1 and first["sums"][1][0] == 1 + 12  # its step 1 with rank 1's step 2
    text = hang_runs.table(run, "skip") + "\n" + hang_runs.sums(run, "skip")
    value = only_true({
        "Both raise at step 1 at once: gloo notices that rank 1 did not call the all-reduce": (
            first["failed_step"] == second["failed_step"] == 1 and not first["waited"]),
        "Rank 0 waits in step 1's all-reduce until the timeout and raises there; rank 1 goes on": (
            first["failed_step"] == 1 and first["waited"] and second["error"] is None),
        "Rank 0's step 1 returns a sum with rank 1's step-2 gradient in it; rank 0 times out at step 2; rank 1 "
        "finishes with no error": mixed and first["failed_step"] == 2 and first["waited"] and second["error"] is None,
        "Nothing goes wrong: rank 0's step 1 returns its own gradient, and both finish": (
            first["error"] is None and second["error"] is None),
    })
    return Outcome(text, value)


def different_sizes() -> Outcome:
    """Rank 1's step-1 gradient has 5 numbers, rank 0's 4, without DETAIL: killed, raised, or returned?"""
    from dpcourse.faults import hang_runs

    run = _run(("other_size",))
    if run.killed:
        rank, how = run.killed
        text = f"rank {rank} was {how}; what it wrote to stderr: {run.logs[rank]}"
        errors, waited = [], []
    else:
        text = hang_runs.table(run, "other_size")
        errors = [outcomes["other_size"]["error"] for outcomes in run.outcomes]
        waited = [outcomes["other_size"]["waited"] for outcomes in run.outcomes]
    value = only_true({
        "Both ranks wait until the timeout and raise \"Timed out waiting 2000ms\"": (
            bool(errors) and all(error and "Timed out" in error for error in errors) and all(waited)),
        "Both ranks raise a RuntimeError at once that names the two sizes": (
            bool(errors) and all(errors) and not any(waited)),
        "gloo aborts rank 0's whole process (SIGABRT): \"Received data size doesn't match expected size\"": (
            run.killed == (0, "killed by SIGABRT")
            and "Received data size doesn't match expected size" in run.logs[0]),
        "It returns: each rank gets the sum of the first 4 numbers, the fifth is left as it was": (
            bool(errors) and not any(errors)),
    })
    return Outcome(text, value)


def detail_reports() -> Outcome:
    """The three faults under DETAIL: which ones are reported at step 1, and how the skip is reported."""
    from dpcourse.faults import hang_runs, hangs

    run = _run((), detail=hangs.FAULTS)
    names = {fault: hangs.key(fault, True) for fault in hangs.FAULTS}

    def at_fault(fault: str) -> bool:
        return any(outcomes[names[fault]]["failed_step"] == hangs.FAULTY_STEP
                   and "Detected mismatch" in (outcomes[names[fault]]["error"] or "") for outcomes in run.outcomes)

    caught = {fault for fault in hangs.FAULTS if at_fault(fault)}
    skip = run.outcomes[0][names["skip"]]
    barrier = skip["failed_step"] == hangs.FAULTY_STEP + 1 and "monitoredBarrier" in (skip["error"] or "")
    text = "\n".join(f"{fault}:\n" + hang_runs.table(run, names[fault]) for fault in hangs.FAULTS)
    value = only_true({
        "All three: DETAIL compares every rank's call before it runs": caught == set(hangs.FAULTS),
        "The broadcast and the 5 numbers; the skip is found one step later, as rank 1 missing from a barrier": (
            caught == {"other_op", "other_size"} and barrier),
        "Only the 5 numbers: the fingerprint holds shapes, not which collective": caught == {"other_size"},
        "None: DETAIL adds log lines, and the faults time out as before": not caught,
    })
    return Outcome(text, value)


def flight_recorder_on_gloo() -> Outcome:
    """Rank 1 calls a broadcast where rank 0 calls an all-reduce: what the Flight Recorder logged on each rank."""
    run = _run(("other_op",))
    outcomes = [outcomes["other_op"] for outcomes in run.outcomes]
    calls = [len(outcome["sums"]) + (outcome["error"] is not None) for outcome in outcomes]  # returned + stuck
    unset = all(value is None for outcome in outcomes for value in outcome["recorder_variables"].values())
    text = "\n".join(f"rank {rank}: {outcome['record']} (states {sorted(set(outcome['states']))}); "
                     f"TORCH_FR_BUFFER_SIZE unset: {unset}" for rank, outcome in enumerate(outcomes))
    value = only_true({
        "No: it is part of ProcessGroupNCCL, gloo's collectives are not recorded": not any(
            outcome["record"] for outcome in outcomes),
        "Only the collective that timed out: the recorder is a snapshot taken at the timeout": all(
            len(outcome["record"]) == 1 for outcome in outcomes),
        "Yes, by default: every collective of every group, with its op and input sizes": unset and all(
            len(outcome["record"]) == count for outcome, count in zip(outcomes, calls, strict=True)),
    })
    return Outcome(text, value)


EXPERIMENTS = (skipped_all_reduce, different_sizes, detail_reports, flight_recorder_on_gloo)
