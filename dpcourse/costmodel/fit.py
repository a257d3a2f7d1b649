"""Fit the cost model's terms to measured steps: ``calibrate()`` on this machine's CPU, ``fit_gpu`` from a recording.

Least squares with every coefficient >= 0 (``_fit``), term by term, in the order the docstrings give.
"""

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from .measure import Setup, measure
from .model import Hardware, step_time
from .presets import PRESETS


def _fit(rows: list[list[float]], times: list[float]) -> list[float]:
    """Least squares with every coefficient >= 0: a negative one is dropped (set to 0) and the rest refitted."""
    columns = list(range(len(rows[0])))
    while True:
        solution = np.linalg.lstsq(np.array(rows)[:, columns], np.array(times), rcond=None)[0]
        if (solution >= 0).all():
            fitted = dict(zip(columns, solution, strict=True))
            return [float(fitted.get(c, 0.0)) for c in range(len(rows[0]))]
        columns.pop(int(np.argmin(solution)))


@dataclasses.dataclass
class Calibration:
    """The fitted ``hardware``; ``table``: every DP step measured, predicted, and whether it was fitted."""

    hardware: Hardware
    table: list[dict]

    def __str__(self) -> str:
        lines = ["hidden depth batch devices  measured ms  predicted ms  error  used"]
        for r in self.table:
            lines.append(f"{r['hidden']:>6} {r['depth']:>5} {r['batch']:>5} {r['devices']:>7} "
                         f"{r['measured'] * 1e3:>12.3f} {r['predicted'] * 1e3:>13.3f} "
                         f"{r['predicted'] / r['measured'] - 1:>+6.0%}  {r['used']}")
        return "\n".join(lines)


def _rows(setups: Sequence[Setup], columns) -> list[list[float]]:
    return [columns(s.devices, s.workload(), s.batch) for s in setups]


def calibrate(sizes: Sequence[tuple[int, int]] = ((32, 10), (768, 3)), batches: Sequence[int] = (16, 64, 128),
              dp_devices: Sequence[int] = (2, 3, 4), check: Sequence[tuple[int, int]] = (), rounds: int = 8
              ) -> Calibration:
    """Fit this machine's terms from DataParallel steps of the lesson MLP, sizes given as ``(hidden, depth)``.

    1. One device, every size and batch: ``T_1 = B * 6P / F + 3S / mu + M * o + h`` gives F, mu, o and h.
    2. Traced DP steps (batch 64) on ``dp_devices`` CPU devices: the ``replicate`` span, ``N * M * r +
       (N-1) * (S / beta + alpha)``, gives r, the cost of building one module's replica.
    3. Untraced DP steps: what they take beyond compute, python and building replicas is ``2 (N-1) (S /
       beta + alpha) + 2 alpha + h_dp``, which gives beta, alpha and h_dp. On CPU devices beta is the rate
       of all DP's per-byte work for each extra replica: the copies and the sum (the ``replicate`` and
       ``reduce-add`` spans), and the replicas' own gradient buffers, which no span times (about half).

    ``check`` sizes are measured in the same run, on 1 and 2 devices, but not fitted: ``table`` shows how
    well the model predicts sizes it has not seen. All CPU devices share one core (``compute_units=1``).
    ``ddp_overhead`` is not measured here; it is the laptop preset's.
    """
    singles = [Setup.lesson_mlp(h, d, 1, b) for h, d in sizes for b in batches]
    traced = [Setup.lesson_mlp(h, d, n, traced=True) for h, d in sizes for n in dp_devices]
    fitted = [Setup.lesson_mlp(h, d, n) for h, d in sizes for n in dp_devices]
    held_out = [Setup.lesson_mlp(h, d, n) for h, d in check for n in (1, 2)]
    results = measure(singles + traced + fitted + held_out, rounds)
    seconds = [total for total, _ in results]
    single_seconds, span_times = seconds[: len(singles)], [spans for _, spans in results[len(singles) :]]
    step_seconds = seconds[len(singles) + len(traced) :]

    rows = _rows(singles, lambda n, w, b: [b * w.flops, 3 * w.params * w.bytes_per_param, w.modules, 1])
    per_flop, per_byte_read, module_time, step_overhead = _fit(rows, single_seconds)
    rows = _rows(traced, lambda n, w, b: [n * w.modules, (n - 1) * w.params * w.bytes_per_param, n - 1])
    replicate_time = _fit(rows, [spans["replicate"] for spans in span_times[: len(traced)]])[0]
    hardware = Hardware("this machine, one core (calibrated)", 1 / per_flop if per_flop else math.inf,
                        1 / per_byte_read if per_byte_read else math.inf, 1, math.inf, 0.0, module_time,
                        replicate_time, step_overhead, 0.0, PRESETS["laptop CPU"].ddp_overhead, pipelined=False,
                        asynchronous=False, sources="fitted by calibrate() on this machine; ddp_overhead from the "
                        "laptop CPU preset")
    return _fit_copies(hardware, fitted, step_seconds[: len(fitted)], held_out, step_seconds[len(fitted) :])


def _fit_copies(hardware: Hardware, fitted: Sequence[Setup], fitted_seconds: Sequence[float],
                held_out: Sequence[Setup], held_out_seconds: Sequence[float]) -> Calibration:
    """Fit alpha and h_dp to what untraced DP steps take beyond the terms ``hardware`` already has, and beta too
    while ``hardware.bandwidth`` is still unknown (math.inf); a measured bandwidth stays as it is."""
    rest = [t - sum(step_time("DataParallel", s.devices, s.workload(), hardware).values())
            for s, t in zip(fitted, fitted_seconds, strict=True)]
    bandwidth = hardware.bandwidth
    if math.isinf(bandwidth):
        rows = _rows(fitted, lambda n, w, b: [2 * (n - 1) * w.params * w.bytes_per_param, 2 * n, 1])
        per_byte, latency, dp_overhead = _fit(rows, rest)
        bandwidth = 1 / per_byte if per_byte else math.inf
    else:
        latency, dp_overhead = _fit(_rows(fitted, lambda n, w, b: [2 * n, 1]), rest)
    hardware = dataclasses.replace(hardware, bandwidth=bandwidth, latency=latency, dp_overhead=dp_overhead)
    table = [{"hidden": s.hidden, "depth": s.depth, "devices": s.devices, "batch": s.batch, "measured": t,
              "predicted": sum(step_time("DataParallel", s.devices, s.workload(), hardware).values()),
              "used": "fitted" if i < len(fitted) else "held out"}
             for i, (s, t) in enumerate(zip([*fitted, *held_out], [*fitted_seconds, *held_out_seconds], strict=True))]
    return Calibration(hardware, table)


def fit_gpu(measured: Sequence[dict], copy_bandwidth: float, name: str, sources: str) -> Calibration:
    """Fit one GPU's terms from ``costmodel.measure`` rows taken on it (``dpcourse.recording`` keeps them).

    Each row is a ``Setup.as_row()`` plus ``seconds`` (its fastest step) and ``spans``. Every replica shares
    the one GPU (``compute_units=1``), and the GPU runs behind Python (``asynchronous``): a step takes
    ``max(compute, python) + h``. ``copy_bandwidth`` is a plain copy's bytes/s within the GPU's memory.

    1. One device, small models (hidden <= 128), whose kernels the GPU finishes faster than Python launches
       them: ``T_1 = M * o + h`` gives o and h.
    2. One device, wide models (hidden >= 2048), where the GPU's arithmetic is the step:
       ``T_1 - h - 3S / mu = B * 6P / F`` gives F. mu is measured, not fitted: the plain copy's bytes read
       plus written per second (3S is too few bytes next to the arithmetic for a fit to find mu).
    3. Traced DP steps: the ``replicate`` span gives r, as ``calibrate`` does.
    4. Untraced DP steps: beta is ``copy_bandwidth`` (copies and sums between replicas stay in the GPU's
       memory), and what the steps take beyond every other term gives alpha and h_dp.

    Sizes not used in 1 and 2 are measured but not fitted: "held out" in the table.
    """
    rows = [(Setup.lesson_mlp(r["hidden"], r["depth"], r["devices"], r["batch"], r["traced"]), r) for r in measured]
    small = [(s, r["seconds"]) for s, r in rows if s.devices == 1 and s.hidden <= 128]
    wide = [(s, r["seconds"]) for s, r in rows if s.devices == 1 and s.hidden >= 2048]
    sizes = {(s.hidden, s.depth) for s, _ in small + wide}
    traced = [(s, r["spans"]) for s, r in rows if s.devices > 1 and s.traced]
    fitted = [(s, r["seconds"]) for s, r in rows if s.devices > 1 and not s.traced and (s.hidden, s.depth) in sizes]
    held_out = [(s, r["seconds"]) for s, r in rows if (s.hidden, s.depth) not in sizes]

    module_time, step_overhead = _fit(_rows([s for s, _ in small], lambda n, w, b: [w.modules, 1]),
                                      [t for _, t in small])
    memory_bandwidth = 2 * copy_bandwidth  # a copy reads every byte it writes
    per_flop = _fit(_rows([s for s, _ in wide], lambda n, w, b: [b * w.flops]),
                    [t - step_overhead - 3 * s.workload().params * s.workload().bytes_per_param / memory_bandwidth
                     for s, t in wide])[0]
    replicate_time = _fit(
        _rows([s for s, _ in traced], lambda n, w, b: [n * w.modules, (n - 1) * w.params * w.bytes_per_param, n - 1]),
        [spans["replicate"] for _, spans in traced])[0]
    hardware = Hardware(name, 1 / per_flop if per_flop else math.inf, memory_bandwidth, 1, copy_bandwidth, 0.0,
                        module_time, replicate_time, step_overhead, 0.0, PRESETS["one GPU"].ddp_overhead,
                        pipelined=False, asynchronous=True, sources=sources)
    return _fit_copies(hardware, [s for s, _ in fitted], [t for _, t in fitted],
                       [s for s, _ in held_out], [t for _, t in held_out])
