"""Lesson 23's exercises: name the slow rank from arrival times, and gather those times inside a DDP step.

``find_straggler`` takes numbers and is judged against ``faults.straggler_reading`` (each rank's wait, the rank
that waited least) on described cases, each made so that one plausible shortcut fails (the last rank at the first
step, the rank last most often, the longest time between arrivals, which under DDP is the same on every rank), and
on generated ones: seeded, with noise on every reading, steps of different lengths, and a straggler slow at some
steps only.

``train_step`` runs on real ranks (``faults.stragglers.probe_on_ranks``) with 150 ms planted in the forward of a
rank drawn at random; the judge reads the hooks' clocks around each step, so only readings taken on each rank
between its forward and its all-reduce, and gathered, pass: a rank named right by a guess does not.
"""

import math
import random

import torch

from dpcourse import examples
from dpcourse.faults import straggler_reading, stragglers
from dpcourse.ranks import SGD_LR, WIDTHS
from dpcourse.ui.words import plural

from .check import Case, Exercise


def _arrivals(periods: list[float], late: dict[tuple[int, int], float], ranks: int, noise: float,
              generator: random.Random, start: float = 5120.0) -> list[list[float]]:
    """Readings of ``ranks`` ranks at ``len(periods)`` collectives: every rank leaves each collective when the
    last one arrived, then computes for ``periods[step]`` (plus noise); ``late[(step, rank)]`` more for a slow one."""
    rows, left = [], start
    for step, period in enumerate(periods):
        row = [left + period + late.get((step, rank), 0.0) + generator.uniform(0, noise) for rank in range(ranks)]
        rows.append(row)
        left = max(row) + 0.002
    return rows


def _described() -> list[Case]:
    generator = random.Random(23)
    every = _arrivals([0.004] * 4, {(step, 2): 0.15 for step in range(4)}, 3, 0.001, generator)
    # Rank 1 is slow twice; rank 0 is last by a hair at the first, the middle and the last step.
    sometimes = _arrivals([0.01, 0.03, 0.01, 0.02, 0.01],
                          {(1, 1): 0.12, (2, 1): 0.12, (0, 0): 0.003, (3, 0): 0.003, (4, 0): 0.003}, 4, 0.001,
                          generator)
    by_a_hair = _arrivals([0.02] * 5, {(0, 0): 0.002, (1, 0): 0.002, (2, 0): 0.002, (4, 0): 0.002, (3, 3): 0.2},
                          4, 0.0005, generator)
    return [
        Case("3 ranks, 4 steps, rank 2 arrives 150 ms late at every collective", (every,),
             "in each step every rank waits from its arrival until the last rank's arrival, the largest reading"),
        Case("4 ranks, 5 steps, one rank slow at steps 1 and 2 only", (sometimes,),
             "a rank slow only now and then makes the others wait each time: add the waits up over all the steps, "
             "do not look at one step alone"),
        Case("4 ranks, 5 steps: one rank last by 2 ms at four steps, another 200 ms late at one", (by_a_hair,),
             "being last by a hair makes the others wait 2 ms; 200 ms late once makes them wait 200 ms: add up "
             "the waits, do not count how often a rank was last"),
    ]


def _generated() -> list[Case]:
    generator = random.Random(2023)
    cases = []
    while len(cases) < 60:
        ranks, steps = generator.randint(2, 8), generator.randint(1, 8)
        slow, delay = generator.randrange(ranks), generator.uniform(0.05, 0.3)
        when = [step for step in range(steps) if generator.random() < 0.6] or [generator.randrange(steps)]
        periods = [generator.uniform(0.002, 0.2) for _ in range(steps)]
        rows = _arrivals(periods, {(step, slow): delay for step in when}, ranks, 0.003, generator,
                         start=generator.uniform(10.0, 1e5))
        late = sorted(straggler_reading.lateness(rows))
        if ranks > 1 and late[-1] - late[-2] < 0.02:  # noise alone must not decide it
            continue
        cases.append(Case(f"{plural(ranks, 'rank')}, {plural(steps, 'step')}, rank {slow} slow at steps {when}",
                          (rows,)))
    return cases


def _judge_straggler(case: Case, answer) -> str | None:
    (arrivals,) = case.args
    ranks = len(arrivals[0])
    expected, waits = straggler_reading.find_straggler(arrivals), straggler_reading.waited(arrivals)
    if not isinstance(answer, tuple | list) or len(answer) != 2:
        return f"expected a pair (rank, waits); got {answer!r}"
    rank, got = answer
    if isinstance(rank, bool) or not isinstance(rank, int):
        return f"expected the rank as a whole number from 0 to {ranks - 1}; got {rank!r}"
    if not isinstance(got, tuple | list) or len(got) != ranks or not all(
            isinstance(t, int | float) and not isinstance(t, bool) for t in got):
        return f"expected waits as {plural(ranks, 'number')}, one per rank, in seconds; got {got!r}"
    for index, (want, wait) in enumerate(zip(waits, got, strict=True)):
        if not math.isclose(want, wait, rel_tol=1e-9, abs_tol=1e-9):
            return (f"waits[{index}]: expected {want * 1e3:.3f} ms, got {wait * 1e3:.3f} ms: add up, over the steps, "
                    f"the time from rank {index}'s arrival to the last rank's arrival")
    if rank == expected:
        return None
    return (f"rank {rank} is not the one the others waited for: rank {expected} waited "
            f"{waits[expected] * 1e3:.1f} ms in all, the least"
            + (f", rank {rank} {waits[rank] * 1e3:.1f} ms" if 0 <= rank < ranks else f"; there is no rank {rank}"))


FIND_STRAGGLER = Exercise(
    name="find_straggler",
    task="Write find_straggler(arrivals): arrivals[step][rank] is each rank's clock reading as it entered the "
         "step's collective (what all_gather_object gives every rank). Return (rank, waits): waits[r], how long "
         "rank r waited at the collectives in all, from its arrival to the last rank's, summed over the steps; "
         "and the rank the others waited for, the one that waited least.",
    cases=_described,
    judge=_judge_straggler,
    generated=_generated,
)

PROBE_STEPS = 3
PROBE_SEED = 23  # draws the rank that sleeps, the same on every run of the check


def _on_ranks(function, case: Case) -> list[dict]:
    (slow_rank,) = case.args
    return stragglers.probe_on_ranks(function, slow_rank, steps=PROBE_STEPS)


def one_device_sgd(world_size: int = stragglers.WORLD_SIZE, steps: int = PROBE_STEPS) -> list[torch.Tensor]:
    """The weights ``probe_on_ranks``'s DDP ranks must end with: SGD on one device, every rank's samples at once,
    one step per call."""
    model = examples.mlp(WIDTHS, 0)
    x, y = examples.regression_batch(stragglers.SAMPLES * world_size, 0)
    optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
    for _ in range(steps):
        optimizer.zero_grad()
        examples.regression_loss(model(x), y).backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def _shape_problem(rank: int, returned, world_size: int) -> str | None:
    if not isinstance(returned, list) or len(returned) != PROBE_STEPS:
        return (f"rank {rank}'s train_step returned {returned!r} over {PROBE_STEPS} steps: return, each step, the "
                "list all_gather_object filled, one reading per rank")
    for step, readings in enumerate(returned):
        if not isinstance(readings, list | tuple) or len(readings) != world_size or not all(
                isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) for t in readings):
            return (f"rank {rank}'s train_step returned {readings!r} at step {step}: expected the list "
                    f"all_gather_object filled, {world_size} numbers (time.perf_counter() of each rank)")
    return None


def _readings_problem(rank: int, records: list[dict], readings: list[list[float]], collectives: list[str]
                      ) -> str | None:
    """Rank ``rank``'s own readings lie between its forward and its all-reduce, and it gathered them."""
    if len(records) != PROBE_STEPS:
        return (f"rank {rank} ran its model's forward {plural(len(records), 'time')} in {PROBE_STEPS} steps: call "
                "model(x) once per train_step")
    if collectives.count("all_gather") < PROBE_STEPS:
        return (f"rank {rank} called {collectives.count('all_gather')} all-gathers in {PROBE_STEPS} steps: gather "
                "every rank's reading with dist.all_gather_object, once per step")
    for step, record in enumerate(records):
        if "arrived" not in record:
            return (f"rank {rank}'s step {step} ran no all-reduce of the gradients: call loss.backward() in "
                    "train_step, after the probe")
        reading = readings[step][rank]
        if not record["forward"] <= reading <= record["arrived"]:
            return (f"rank {rank}'s own reading at step {step} ({reading:.3f}) was not taken between the end of its "
                    f"forward ({record['forward']:.3f}) and its arrival at DDP's all-reduce ({record['arrived']:.3f}):"
                    " read time.perf_counter() after the loss and before all_gather_object and loss.backward()")
    return None


def _judge_probe(case: Case, answer: list[dict]) -> str | None:
    (slow_rank,) = case.args
    world_size = len(answer)
    for rank, result in enumerate(answer):
        problem = _shape_problem(rank, result["returned"], world_size)
        if problem:
            return problem
    readings = [list(map(float, row)) for row in answer[0]["returned"]]
    for rank, result in enumerate(answer):
        if [list(map(float, row)) for row in result["returned"]] != readings:
            return (f"rank {rank} returned other readings than rank 0: with all_gather_object every rank gets the "
                    "same list, every rank's reading in rank order")
    for rank, result in enumerate(answer):
        problem = _readings_problem(rank, result["records"], readings, result["collectives"])
        if problem:
            return problem
    late = straggler_reading.lateness(readings)
    enough = 0.5 * stragglers.DELAY * PROBE_STEPS  # the sleep, summed over the steps, at least half of it
    if straggler_reading.find_straggler(readings) != slow_rank or late[slow_rank] < enough:
        return (f"the readings do not show the rank that slept arriving last (lateness per rank, summed: "
                f"{', '.join(f'{t * 1e3:.1f} ms' for t in late)}): read the clock before the probe's collective, "
                "not after it, where every rank has waited for the slow one")
    expected = one_device_sgd(world_size)
    for rank, result in enumerate(answer):
        if not all(torch.allclose(got, want, rtol=1e-5, atol=1e-6)
                   for got, want in zip(result["parameters"], expected, strict=True)):
            return (f"rank {rank}'s weights after {PROBE_STEPS} steps differ from SGD on one device: each "
                    "train_step must zero the gradients, run the backward and step the optimizer once")
    return None


TRAIN_STEP = Exercise(
    name="train_step",
    task="Write train_step(model, x, y, optimizer), one DDP training step with a probe: zero the gradients, "
         "compute F.mse_loss(model(x), y), read time.perf_counter(), gather every rank's reading with "
         "dist.all_gather_object, then loss.backward() and optimizer.step(); return the gathered list.",
    cases=lambda: [Case(f"3 ranks, {PROBE_STEPS} steps, 150 ms of sleep in the forward of a rank drawn at random "
                        f"(seed {PROBE_SEED})", (random.Random(PROBE_SEED).randrange(stragglers.WORLD_SIZE),),
                        "read the clock after the forward and before the gather: the gather waits for the slow "
                        "rank, so a reading after it is the same on every rank")],
    judge=_judge_probe,
    call=_on_ranks,
    slow="starting 3 ranks and training 3 steps with a delay planted on one of them (a few seconds)",
)

EXERCISES = (FIND_STRAGGLER, TRAIN_STEP)
