"""Lesson 25's exercises: fit α and β to measured collective times, and predict a DDP or ZeRO-3 step from them.

Both are judged against ``costmodel.alpha_beta``, whose rules ``tests/test_alpha_beta.py`` holds against real
ranks. The judges look for the mechanism as well as the number: the fit on points generated from a known α and
β (with noise), where fitting the largest size alone or a line through zero gives other numbers, and on this
machine's own all-reduce times; the step term by term, on generated cases where forgetting the ``(p - 1) / p``,
the all-reduce's 2, or ZeRO-3's second all-gather each changes a term, and the message names which.
"""

import functools
import random

import numpy as np

from dpcourse.costmodel import alpha_beta
from dpcourse.ui.words import plural

from .check import Case, Exercise

KIB, MIB = 2**10, 2**20
SIZES = (4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB)


def generated_points(alpha: float, beta: float, steps: float, factor: float, seed: int) -> tuple[list, list]:
    """Times of ``steps * alpha + factor * n / beta`` at ``SIZES``, each off by up to 5 % (seeded)."""
    generator = random.Random(seed)
    times = [(steps * alpha + factor * n / beta) * (1 + generator.uniform(-0.05, 0.05)) for n in SIZES]
    return list(SIZES), times


@functools.cache
def measured_all_reduce() -> tuple[tuple[int, ...], tuple[float, ...]]:
    """This machine's all-reduce on 2 ranks: the lesson's own measurement if this process made one (the ranks take
    seconds to start), else 4 KiB to 4 MiB measured now, once per session."""
    from dpcourse.ranks import collective_times  # starts ranks: imported when a check needs it

    if any(t.collective == "all_reduce" and t.world_size == 2 for t in collective_times.latest()):
        sizes, seconds = collective_times.of(collective_times.latest(), "all_reduce")
        return tuple(sizes), tuple(seconds)
    timings = collective_times.measure(sizes=(4 * KIB, 64 * KIB, MIB, 4 * MIB), collectives=("all_reduce",),
                                       repeats=5)
    sizes, seconds = collective_times.of(timings, "all_reduce")
    return tuple(sizes), tuple(seconds)


def _mistakes(sizes, times, steps, factor) -> dict[str, tuple[float, float]]:
    """What the plausible wrong fits give: the largest size alone, a line through zero, plain least squares."""
    sizes, times = np.asarray(sizes, dtype=float), np.asarray(times, dtype=float)
    largest = int(np.argmax(sizes))
    through_zero = float((factor * sizes * times).sum() / ((factor * sizes) ** 2).sum())
    plain = np.linalg.lstsq(np.stack([np.full_like(sizes, steps), factor * sizes], axis=1), times, rcond=None)[0]
    return {
        "the largest size alone (alpha = 0)": (0.0, factor * sizes[largest] / times[largest]),
        "a line through zero: alpha left out": (0.0, 1 / through_zero),
        "plain least squares on seconds, which lets the largest sizes decide": (float(plain[0]), float(1 / plain[1])),
    }


def _close(a: float, b: float, tolerance: float = 1e-6) -> bool:
    return abs(a - b) <= tolerance * max(abs(a), abs(b), 1e-12)


def _judge_fit(case: Case, answer) -> str | None:
    sizes, times, steps, factor = case.args
    alpha, beta = alpha_beta.fit_alpha_beta(sizes, times, steps, factor)
    if not isinstance(answer, list | tuple) or len(answer) != 2:
        return f"expected (alpha, beta), two numbers; got {answer!r}"
    got_alpha, got_beta = (float(x) for x in answer)
    if _close(got_alpha, alpha) and _close(got_beta, beta):
        return None
    for mistake, (wrong_alpha, wrong_beta) in _mistakes(sizes, times, steps, factor).items():
        if _close(got_alpha, wrong_alpha, 1e-4) and _close(got_beta, wrong_beta, 1e-4):
            return (f"your (alpha, beta) are what {mistake} gives. Fit every point, each row [steps, factor * n] "
                    "and its time divided by the time")
    return (f"expected alpha = {alpha:.4g} s and beta = {beta:.4g} bytes/s (least squares on relative errors); "
            f"got alpha = {got_alpha:.4g}, beta = {got_beta:.4g}")


def _generated_fits() -> list[Case]:
    generator = random.Random(25)
    cases = []
    for number in range(20):
        alpha, beta = generator.uniform(5e-6, 5e-4), generator.uniform(2e8, 5e10)
        world_size = generator.randint(2, 8)
        steps, factor = alpha_beta.ring_terms(generator.choice(list(alpha_beta.RING_ROUNDS)), world_size)
        sizes, times = generated_points(alpha, beta, steps, factor, seed=number)
        cases.append(Case(f"case {number}: alpha {alpha:.2g} s, beta {beta:.2g} B/s, {steps} steps",
                          (sizes, times, steps, factor)))
    return cases


def _measured_case() -> Case:
    sizes, times = measured_all_reduce()
    steps, factor = alpha_beta.ring_terms("all_reduce", 2)
    return Case("this machine's all-reduce on 2 ranks", (list(sizes), list(times), steps, factor),
                "the same rule as on generated points: every point counts, relative to its own time")


FIT_ALPHA_BETA = Exercise(
    name="fit_alpha_beta",
    task="Write fit_alpha_beta(sizes, times, steps, factor): the (alpha, beta) of t = steps * alpha + factor * n / "
         "beta that fit the measured times (seconds) at sizes n (bytes), by least squares on relative errors: "
         "divide each row [steps, factor * n] and its time by that time, solve with np.linalg.lstsq, and beta is "
         "1 over the second coefficient.",
    cases=lambda: [
        Case("an all-reduce on 2 ranks, alpha 50 µs, beta 1 GB/s, 5 % noise",
             (*generated_points(5e-5, 1e9, 2, 1.0, seed=0), 2, 1.0),
             "at 4 KiB the time is almost all alpha; at 16 MiB almost all bytes: both decide"),
        Case("an all-gather on 4 ranks, alpha 20 µs, beta 10 GB/s", (*generated_points(2e-5, 1e10, 3, 0.75, 1), 3,
                                                                     0.75)),
        _measured_case(),
    ],
    judge=_judge_fit,
    generated=_generated_fits,
    slow="the third case uses the lesson's all-reduce times (or measures them on 2 ranks: a few seconds)",
)


TERMS = ("compute", "forward_exposed", "backward_exposed")


def _step_mistakes(kind, world_size, layers, layer_bytes, forward, backward, alpha, beta) -> dict[str, dict]:
    """The terms that the plausible mistakes give."""
    p = world_size
    steps, factor = alpha_beta.ring_terms("all_reduce", p)
    compute = layers * (forward + backward)

    def with_layer(forward_comm: float, backward_comm: float) -> dict:
        return {"compute": compute, "forward_exposed": alpha_beta.exposed(forward_comm, forward, layers),
                "backward_exposed": alpha_beta.exposed(backward_comm, backward, layers)}

    if kind == "DDP":
        return {
            "an all-reduce without the (p - 1) / p factor": with_layer(0, steps * alpha + 2 * layer_bytes / beta),
            "an all-reduce without its 2 (one trip round the ring)": with_layer(
                0, steps / 2 * alpha + factor / 2 * layer_bytes / beta),
            "every all-reduce exposed, none hidden": {"compute": compute, "forward_exposed": 0.0,
                                                      "backward_exposed": layers * alpha_beta.collective_time(
                                                          "all_reduce", p, layer_bytes, alpha, beta)},
        }
    one = alpha_beta.collective_time("all_gather", p, layer_bytes, alpha, beta)
    return {
        "ZeRO-3 without the backward's all-gather (reduce-scatter only)": with_layer(one, one),
        "ZeRO-3 without the forward's all-gather": with_layer(0, 2 * one),
        "ZeRO-3 with DDP's all-reduce in the backward instead": with_layer(
            one, alpha_beta.collective_time("all_reduce", p, layer_bytes, alpha, beta)),
        "collectives without the (p - 1) / p factor": with_layer(
            (p - 1) * alpha + layer_bytes / beta, 2 * ((p - 1) * alpha + layer_bytes / beta)),
    }


def _judge_step(case: Case, answer) -> str | None:
    expected = alpha_beta.step_terms(*case.args)
    if not isinstance(answer, dict) or set(answer) != set(TERMS):
        return f"expected a dict with the keys {list(TERMS)}; got {answer!r}"
    wrong = [term for term in TERMS if not _close(float(answer[term]), expected[term])]
    if not wrong:
        return None
    for mistake, terms in _step_mistakes(*case.args).items():
        if all(_close(float(answer[t]), terms[t], 1e-6) for t in TERMS):
            return f"your terms are what {mistake} gives ({wrong[0]} = {answer[wrong[0]]:.4g} s)"
    return (f"{wrong[0]}: expected {expected[wrong[0]]:.4g} s, got {float(answer[wrong[0]]):.4g} s "
            f"(kind {case.args[0]}, {case.args[1]} ranks)")


def _step_case(generator: random.Random, number: int) -> Case:
    kind, world_size, layers = generator.choice(alpha_beta.KINDS), generator.randint(2, 8), generator.randint(2, 6)
    alpha, beta = generator.uniform(1e-6, 1e-3), generator.uniform(1e9, 1e11)
    layer_bytes = generator.choice([1, 4, 16, 64]) * MIB
    one = alpha_beta.collective_time("all_reduce", world_size, layer_bytes, alpha, beta)
    forward, backward = (one * generator.uniform(0.2, 3) for _ in range(2))  # some hide, some do not
    return Case(f"case {number}: {kind} on {plural(world_size, 'rank')}, {plural(layers, 'layer')}",
                (kind, world_size, layers, layer_bytes, forward, 2 * backward, alpha, beta))


PREDICT_STEP = Exercise(
    name="predict_step",
    task="Write predict_step(kind, world_size, layers, layer_bytes, forward, backward, alpha, beta) for kind 'DDP' "
         "or 'ZeRO-3': {'compute': layers * (forward + backward), 'forward_exposed': ..., 'backward_exposed': ...}, "
         "where a pass whose layers each communicate m seconds and compute c exposes m + (layers - 1) * max(0, m - "
         "c) (0 when m is 0). Ring times: all-reduce 2(p-1) alpha + 2(p-1)/p * n / beta, all-gather and reduce-"
         "scatter (p-1) alpha + (p-1)/p * n / beta. DDP: one all-reduce per layer in the backward. ZeRO-3: an "
         "all-gather per layer in the forward; an all-gather and a reduce-scatter per layer in the backward.",
    cases=lambda: [
        Case("DDP, 2 ranks, 4 layers of 4 MiB, 30 ms of backward each: it hides",
             ("DDP", 2, 4, 4 * MIB, 0.0, 0.03, 3e-4, 1e9), "one all-reduce: 2 * 1 * alpha + 2 * 1/2 * n / beta"),
        Case("DDP, 8 ranks, 4 layers of 64 MiB, 10 ms each: it does not hide", ("DDP", 8, 4, 64 * MIB, 0.005, 0.01,
                                                                                1e-5, 2.5e10)),
        Case("ZeRO-3, 4 ranks, 3 layers of 16 MiB", ("ZeRO-3", 4, 3, 16 * MIB, 0.002, 0.004, 2e-5, 2.5e10),
             "the backward gathers the layer again before it runs, then reduce-scatters its gradients"),
        Case("one rank: nothing to communicate", ("ZeRO-3", 1, 3, 16 * MIB, 0.002, 0.004, 2e-5, 2.5e10)),
    ],
    judge=_judge_step,
    generated=lambda: [_step_case(random.Random(2500 + n), n) for n in range(40)],
)

EXERCISES = (FIT_ALPHA_BETA, PREDICT_STEP)
