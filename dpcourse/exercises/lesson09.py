"""Lesson 09's exercise: the bytes one DataParallel training step moves."""

from ..ui.words import plural
from .check import Case, Exercise, equals


def _bytes_per_step(parameter_bytes: int, n: int) -> dict[str, int]:
    return {"replicate": (n - 1) * parameter_bytes, "reduce-add": (n - 1) * parameter_bytes}


def _sizes_on_up_to_8_devices() -> list[Case]:
    return [Case(f"{plural(p, 'byte')} on {plural(n, 'device')}", (p, n))
            for p in (1, 4, 1000, 3 * 2**20) for n in range(1, 9)]


BYTES_PER_STEP = Exercise(
    name="bytes_per_step",
    task="Write bytes_per_step(parameter_bytes, n): a dict with the bytes one training step copies out to the "
         "replicas ('replicate') and sums back onto devices[0] ('reduce-add'), for a model of parameter_bytes "
         "bytes on n devices.",
    cases=lambda: [
        Case("1 MB of parameters on 1 device", (1_000_000, 1), "one device: nothing is copied or summed"),
        Case("1 MB on 2 devices", (1_000_000, 2), "replica 0 uses the original parameters: it needs no copy"),
        Case("a 4 MiB model on 4 devices", (4 * 2**20, 4),
             "n - 1 replicas each get a copy and send a gradient of the same size back"),
        Case("a 100 MB model on 8 GPUs", (100_000_000, 8)),
    ],
    judge=equals(_bytes_per_step),
    generated=_sizes_on_up_to_8_devices,
)

EXERCISES = (BYTES_PER_STEP,)
