"""What lesson 23 prints from ``stragglers.observe``, and the verdicts its quiz reads: each compares a median
over the steps with half or a quarter of the planted delay, far from where a busy machine's jitter could move it.

Every time is printed as ``12.3 ms``, the one form the notebooks' checks read as a time and set aside; the verdicts
(``yes`` / ``no``, which phase grew) are what a stored output keeps.
"""

from collections.abc import Sequence

from .straggler_reading import arrivals, find_straggler, last_to_arrive, median, waited

ROUGH, SMALL = 0.5, 0.25  # "about the delay": at least half of it; "hardly": under a quarter of it


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def _yes(holds: bool) -> str:
    return "yes" if holds else "no"


def grown(results: Sequence[dict], part: str, name: str, rank: int) -> float:
    """How many seconds rank ``rank``'s median ``name`` phase grew in ``part`` over the part with no delay."""
    return median(results[rank][part], name) - median(results[rank]["even"], name)


def _others(results: Sequence[dict], slow_rank: int) -> list[int]:
    return [rank for rank in range(len(results)) if rank != slow_rank]


def steps(results: Sequence[dict], slow_rank: int, delay: float) -> tuple[str, dict[str, bool]]:
    """Each rank's median step without and with the delay in the forward; the claims of ``23-step-times``."""
    rises = [grown(results, "forward", "step", rank) for rank in range(len(results))]
    lines = [f"rank {rank}: {_ms(median(result['even'], 'step'))} without the delay, "
             f"{_ms(median(result['forward'], 'step'))} with it" for rank, result in enumerate(results)]
    every = min(rises) >= ROUGH * delay
    lines.append(f"every rank's step grew by at least half the delay: {_yes(every)}")
    slow, others = rises[slow_rank], [rises[rank] for rank in _others(results, slow_rank)]
    return "\n".join(lines), {
        "every": every,
        "only slow": slow >= ROUGH * delay and max(others) < SMALL * delay,
        "part": slow >= ROUGH * delay and SMALL * delay <= min(others) and max(others) < ROUGH * delay,
    }


def phases(results: Sequence[dict], part: str, slow_rank: int, delay: float) -> tuple[str, dict[str, bool]]:
    """Each rank's median forward, backward (its wait in the all-reduce) and optimizer step in ``part``; which of
    them grew by half the delay or more on every rank but ``slow_rank``."""
    lines = []
    for rank, result in enumerate(results):
        records = result[part]
        lines.append(f"rank {rank}: forward {_ms(median(records, 'forward'))}, backward "
                     f"{_ms(median(records, 'backward'))} (of it waiting in the all-reduce "
                     f"{_ms(median(records, 'waiting'))}), optimizer {_ms(median(records, 'optimizer'))}")
    others = _others(results, slow_rank)
    grew = {name: all(grown(results, part, name, rank) >= ROUGH * delay for rank in others)
            for name in ("forward", "backward", "waiting", "optimizer")}
    found = [name for name in ("forward", "backward", "optimizer") if grew[name]]
    names = " and ".join(f"rank {rank}" for rank in others)
    lines.append(f"{names}: the phases that grew by at least half the delay: {', '.join(found) or 'none'}")
    return "\n".join(lines), grew


def backwards(results: Sequence[dict], slow_rank: int, delay: float) -> tuple[str, dict[str, bool]]:
    """Each rank's median ``loss.backward()`` with the delay in the forward and in the backward; in the backward
    part, whose is the shortest."""
    lines = [f"rank {rank}: loss.backward() {_ms(median(result['forward'], 'backward'))} with the delay in the "
             f"forward, {_ms(median(result['backward'], 'backward'))} with it in the backward"
             for rank, result in enumerate(results)]
    times = [median(result["backward"], "backward") for result in results]
    others = [times[rank] for rank in _others(results, slow_rank)]
    claims = {"slow shortest": times[slow_rank] <= min(others) - ROUGH * delay,
              "others shortest": max(others) <= times[slow_rank] - ROUGH * delay,
              "equal": max(times) - min(times) < SMALL * delay and min(times) >= ROUGH * delay}
    lines.append(f"delay in the backward: every rank's backward within a quarter of the delay of the others': "
                 f"{_yes(claims['equal'])}")
    return "\n".join(lines), claims


def probed(results: Sequence[dict], slow_rank: int, delay: float) -> tuple[str, dict[str, bool]]:
    """With the probe (an ``all_gather_object`` before ``loss.backward()``): where the other ranks wait."""
    lines = [f"rank {rank}: in the probe's all_gather_object {_ms(median(records, 'gather'))}, waiting in the "
             f"all-reduce {_ms(median(records, 'waiting'))}, step {_ms(median(records, 'step'))}"
             for rank, records in enumerate(result["probed"] for result in results)]
    others = _others(results, slow_rank)
    gather = [median(results[rank]["probed"], "gather") for rank in others]
    wait = [median(results[rank]["probed"], "waiting") for rank in others]
    rise = [grown(results, "probed", "step", rank) for rank in range(len(results))]
    claims = {"gather": min(gather) >= ROUGH * delay and max(wait) < SMALL * delay,
              "all-reduce": min(wait) >= ROUGH * delay and max(gather) < SMALL * delay,
              "twice": min(rise) >= 1.5 * delay}
    lines.append(f"the others waited in the probe, not in the all-reduce: {_yes(claims['gather'])}")
    return "\n".join(lines), claims


def last_line(results: Sequence[dict], part: str) -> str:
    """Who arrived last at DDP's all-reduce in each step of ``part``, the rank the others waited for
    (``find_straggler``), and what each rank waited there in all."""
    found = arrivals(results, part)
    last = ", ".join(f"rank {rank}" for rank in last_to_arrive(found))
    waits = ", ".join(f"rank {rank} {_ms(seconds)}" for rank, seconds in enumerate(waited(found)))
    return (f"last to arrive, step by step: {last}\nthe rank the others waited for: rank {find_straggler(found)}\n"
            f"waited in all: {waits}")
