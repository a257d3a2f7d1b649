"""Experiments for lesson 25 (alpha_beta): each starts real gloo ranks and measures the answer.

The collectives are timed by ``ranks.collective_times.measure``; DDP's backward by ``ddp.overlap.measure``, with
30 ms of compute planted in each of 4 layers' backward. Each answer is decided by a wide margin: 16 times the bytes
takes under 8 times the time at the small sizes, and more than 3 times and twice the small ones' growth at the
large; the first all-reduce starts within the first half of the backward; the tail is under three quarters of
the communication. A busy machine, which slows some rounds by milliseconds, cannot move them. Both modules are
imported inside the experiments, when they run (they load ``torch.distributed``).
"""

from ..outcome import Outcome, only_true

KIB, MIB = 2**10, 2**20
SMALL, LARGE = (4 * KIB, 64 * KIB), (MIB, 16 * MIB)


def growing_messages() -> Outcome:
    """An all-reduce on 2 ranks at 4 KiB and 64 KiB, and at 1 MiB and 16 MiB: how its time grows with 16x bytes."""
    from dpcourse.ranks import collective_times

    timings = collective_times.measure(sizes=(*SMALL, *LARGE), collectives=("all_reduce",), repeats=15)
    small = collective_times.at(timings, "all_reduce", SMALL[1]) / collective_times.at(timings, "all_reduce", SMALL[0])
    large = collective_times.at(timings, "all_reduce", LARGE[1]) / collective_times.at(timings, "all_reduce", LARGE[0])
    text = (f"16 times the bytes: 4 KiB -> 64 KiB takes {small:.1f} times as long, 1 MiB -> 16 MiB {large:.1f} times "
            "as long (medians over 15 rounds)")
    value = only_true({
        "It barely changes for the small ones, and grows about as much as the bytes for the large ones": (
            small < 8 and large > max(3, 2 * small)),
        "About 16 times longer at both sizes: the time is the bytes over the bandwidth": small >= 8,
        "It barely changes at both sizes: a message costs its latency, whatever its size": (
            small < 8 and large <= max(3, 2 * small)),
    })
    return Outcome(text, value)


def _step() -> dict:
    from dpcourse.ddp import overlap

    return overlap.measure()


def first_all_reduce() -> Outcome:
    """One DDP backward of 4 layers, 30 ms of compute each: when the first bucket's all-reduce started."""
    step = _step()
    first = step["buckets"][0][2]
    text = (f"the first all-reduce started {first * 1e3:.0f} ms into the backward; the last gradient was ready at "
            f"{step['compute_end'] * 1e3:.0f} ms")
    value = only_true({
        "As soon as the last layer's gradients are ready, while the backward computes the other layers": (
            0 <= first < step["compute_end"] / 2),
        "Once the whole backward is over: DDP all-reduces every gradient at the end": first >= step["compute_end"] / 2,
        "Before the backward: DDP starts sending when the forward ends": first < 0,
    })
    return Outcome(text, value)


def what_shows() -> Outcome:
    """The same DDP backward: how much of its all-reduce time came after the slowest rank's last gradient."""
    from dpcourse.ddp import overlap

    step = _step()
    tail, total = overlap.tail(step), overlap.communication(step)
    text = (f"all-reduces: {total * 1e3:.0f} ms in all; after the last gradient: {tail * 1e3:.0f} ms "
            f"({tail / total:.0%})")
    value = only_true({
        "About one bucket's all-reduce: the last one; the others ran while the backward computed": (
            0.002 <= tail < 0.75 * total),
        "All of it: backward() waits for every all-reduce after computing": tail >= max(0.002, 0.75 * total),
        "None of it: every all-reduce hides behind the compute": tail < 0.002,
    })
    return Outcome(text, value)


EXPERIMENTS = (growing_messages, first_all_reduce, what_shows)
