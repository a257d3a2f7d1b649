"""How long one training step takes under DataParallel and under DDP, term by term, and when DP stops paying off.

``formula("dp")`` and ``formula("ddp")`` give the model as text; ``step_time(kind, n, workload, hardware)``
returns every term separately (a widget can stack them); ``predict_speedup(preset)`` gives the speed-up over
one device for n = 1..8. ``PRESETS`` are rough numbers for common machines, each with its sources
(``Hardware.sources``); ``calibrate()`` measures *this* machine's terms from DataParallel steps on CPU devices.
``dpcourse.viz.plot_speedup`` draws the curves. The GPU presets come from published specifications and assumed
orders of magnitude, not from a GPU measurement: what they give is a prediction of the cost model.
``fit_gpu`` fits one real GPU's terms from the steps recorded on it (``dpcourse.recording``).

A teaching model: each term is one line of the formula, not a simulation. It ignores memory limits, kernel
fusion, uneven chunks and GPU scheduling. Its job is to show which term grows with what.

How FLOPs are counted, here and everywhere in the course: a multiply-add is 2 FLOPs (as
``torch.utils.flop_counter.FlopCounterMode`` and GPU datasheets count them, so C and F agree), and a training
step's FLOPs are 3 times the forward's (backward does two products for each forward one: the gradient of the
layer's input and of its weights). Only matrix products and convolutions count. So an MLP's C is 6P, and
ResNet-50's is ``resnet50_flops()``; tests/test_costmodel.py checks both against ``FlopCounterMode``.
"""

import contextlib
import dataclasses
import functools
import math
import os
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import torch
from torch import nn

from .data_parallel import DataParallel
from .examples import loss_fn
from .timing import one_thread_per_operation, synchronized_clock, timed_step
from .trace import trace
from .workloads import ModelToTime, lesson_mlp

Kind = Literal["single", "dp", "ddp"]
FORMULAS = {
    "single": "T_1 = B * C / F + 3S / mu  (compute)  +  M * o  (python)  +  h  (overhead)",
    "dp": """\
T_DP(N) = compute    (B * C / F + N * 3S / mu) / min(N, U)  the batch's FLOPs; each replica reads the weights 3x
        + python     N * M * o                          every replica's modules, one at a time (one GIL)
        + replicate  N * M * r + c(N) * (S/beta + alpha)  build N replicas, copy the S parameter bytes
        + reduce     c(N) * (S/beta + alpha)            sum the gradients onto device 0
        + scatter    (N-1)/N * B * x / beta + 2 * alpha  inputs out, outputs back to device 0
        + overhead   h + h_dp                           threads, autograd bookkeeping
c(N) = N-1 copies one after another, or 1 when they are pipelined (NCCL broadcast and reduce). N = 1 is T_1.""",
    "ddp": """\
T_DDP(N) = compute    (B * C / F + N * 3S / mu) / min(N, U)  each process: B/N samples, all the weights
         + python     M * o                             one replica per process, all in parallel
         + allreduce  max(A - 2/3 * compute, A / k)     what backward does not hide; the last bucket never is
         + overhead   h + h_ddp
A = 2 (N-1)/N * S/beta + 2 (N-1) k * alpha: a ring all-reduce of S bytes in k = ceil(S / 25 MiB) buckets.""",
}
SYMBOLS = """\
B batch, C FLOPs per sample, forward + backward (6P for an MLP: forward 2, backward 4 per parameter), P parameters,
S = P * bytes per parameter, M modules, x input + output bytes per sample, F FLOP/s of one device,
mu its memory bytes/s, U devices that compute at the same time, beta link bytes/s, alpha seconds per transfer,
o Python seconds per module call (forward + backward), r seconds to replicate one module,
h every step's fixed cost, h_dp and h_ddp what DP and DDP add to it.
On a GPU, Python only queues the kernels, so the python term counts only what the GPU does not hide:
max(0, python - compute)."""
BUCKET_BYTES = 25 * 2**20


def _whole(owner: object, name: str, least: int) -> None:
    """Raise ValueError unless ``owner.name`` is a whole number >= ``least``."""
    value = getattr(owner, name)
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{type(owner).__name__}.{name} must be a whole number >= {least}, not {value!r}.")


def _amount(owner: object, name: str, positive: bool, infinite: bool = False) -> None:
    """Raise ValueError unless ``owner.name`` is a real number, > 0 if ``positive`` else >= 0.

    NaN is never one (every comparison with it is False, so it would give NaN speed-ups and "DP never pays
    off"); +inf is one only where ``infinite``: a rate of math.inf bytes/s means "costs nothing".
    """
    value = getattr(owner, name)
    finite = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not (finite or (infinite and value == math.inf)) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else ">= 0"
        also = " (or math.inf, for a cost of zero)" if infinite else ""
        raise ValueError(f"{type(owner).__name__}.{name} must be a number {bound}{also}, not {value!r}.")


@dataclasses.dataclass(frozen=True)
class Workload:
    """What is trained: ``params`` in ``modules`` modules, ``batch`` samples per step (the global batch)."""

    params: int
    modules: int
    batch: int
    flops_per_sample: float = 0.0  # 0: 6 * params, right for MLPs and transformers (per token)
    bytes_per_param: int = 4
    sample_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("params", "modules", "batch", "bytes_per_param"):
            _whole(self, name, 1)
        _whole(self, "sample_bytes", 0)
        _amount(self, "flops_per_sample", positive=False)  # 0 means 6 * params

    @classmethod
    def of(cls, module: nn.Module, batch: int, sample_bytes: int = 0) -> "Workload":
        params = list(module.parameters())
        size = params[0].element_size() if params else 4
        return cls(sum(p.numel() for p in params), len(list(module.modules())), batch, 0.0, size, sample_bytes)

    @property
    def flops(self) -> float:
        return self.flops_per_sample or 6 * self.params


@dataclasses.dataclass(frozen=True)
class Hardware:
    """One machine's terms, named as in ``SYMBOLS``.

    ``pipelined``: DP's N-1 copies cost one (NCCL). ``asynchronous``: Python queues the work and runs ahead
    of the device (GPUs), instead of waiting for every operation (CPUs). ``sources``: where each number comes
    from, and which ones are assumptions.
    """

    name: str
    flops: float
    memory_bandwidth: float
    compute_units: int
    bandwidth: float
    latency: float
    module_time: float
    replicate_time: float
    step_overhead: float
    dp_overhead: float
    ddp_overhead: float
    pipelined: bool
    asynchronous: bool
    sources: str = ""

    def __post_init__(self) -> None:
        _whole(self, "compute_units", 1)
        for rate in ("flops", "memory_bandwidth", "bandwidth"):  # per second: a rate of 0 never finishes
            _amount(self, rate, positive=True, infinite=True)
        for seconds in ("latency", "module_time", "replicate_time", "step_overhead", "dp_overhead", "ddp_overhead"):
            _amount(self, seconds, positive=False)


# Where the presets' numbers come from. None of them was measured on a GPU for this course.
_GPU = ("F = 15 TFLOP/s fp32: assumed achievable, about 3/4 of the 19.5 TFLOP/s peak in NVIDIA's A100 "
        "datasheet; mu = 1.5 TB/s: the A100 40GB's HBM2 bandwidth, 1,555 GB/s (same datasheet)")
_OVERHEADS = ("o, r, h, h_dp, h_ddp and the per-transfer latency alpha: assumed orders of magnitude (tens of "
              "microseconds per module call or transfer), not measured on a GPU")
_SOURCES = {
    "laptop CPU": "every term fitted by calibrate() on one core of this course's 2-core VM, then rounded",
    "one GPU": f"{_GPU}; beta = 500 GB/s: assumed, a copy within one GPU's memory; {_OVERHEADS}",
    "8 GPUs, PCIe": (f"{_GPU}; beta = 12 GB/s: assumed achievable, about 3/4 of PCIe 3.0 x16's 15.75 GB/s per "
                     f"direction (PCI-SIG PCIe 3.0: 8 GT/s per lane, 128b/130b encoding); {_OVERHEADS}"),
    "8 GPUs, NVLink": (f"{_GPU}; beta = 150 GB/s: assumed achievable by NCCL, half of the 300 GB/s per "
                       f"direction that the A100 datasheet's 600 GB/s NVLink total gives; {_OVERHEADS}"),
}


def _preset(name: str, flops: float, memory: float, units: int, link: float, latency: float, pipelined: bool
            ) -> Hardware:
    gpu = "GPU" in name
    return Hardware(name, flops, memory, units, link, latency, module_time=3e-5 if gpu else 2.5e-5,
                    replicate_time=1.5e-5, step_overhead=5e-5, dp_overhead=3e-4, ddp_overhead=1e-4,
                    pipelined=pipelined, asynchronous=gpu, sources=_SOURCES[name])


# Orders of magnitude, not benchmarks: ``Hardware.sources`` says where each preset's numbers come from.
PRESETS = {
    "laptop CPU": _preset("laptop CPU", 9e10, 2.5e10, 1, 4e9, 2e-6, pipelined=False),
    "one GPU": _preset("one GPU", 1.5e13, 1.5e12, 1, 5e11, 1e-5, pipelined=False),
    "8 GPUs, PCIe": _preset("8 GPUs, PCIe", 1.5e13, 1.5e12, 8, 1.2e10, 1.5e-5, pipelined=True),
    "8 GPUs, NVLink": _preset("8 GPUs, NVLink", 1.5e13, 1.5e12, 8, 1.5e11, 8e-6, pipelined=True),
}


def resnet50_layers(image: int = 224) -> list[tuple[int, int, int, int]]:
    """ResNet-50's convolutions and its final Linear as ``(kernel, in channels, out channels, output side)``.

    The layout of He et al. 2016 (table 1) as torchvision and transformers build it: a 7x7 stride-2 stem and a
    stride-2 max pool, then 3, 4, 6, 3 bottleneck blocks (1x1, 3x3, 1x1 convolutions, the stride on the 3x3),
    the first block of each stage with a 1x1 projection of its input; the Linear is a 1x1 "convolution" on the
    pooled 2048 features.
    """
    side = image // 4  # the stem and the max pool each halve the side
    layers, channels = [(7, 3, 64, image // 2)], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for block in range(blocks):
            out = side // stride if block == 0 else side
            layers += [(1, channels, width, side), (3, width, width, out), (1, width, 4 * width, out)]
            layers += [(1, channels, 4 * width, out)] if block == 0 else []
            side, channels = out, 4 * width
    return [*layers, (1, 2048, 1000, 1)]


def resnet50_flops(image: int = 224) -> float:
    """ResNet-50's FLOPs per image, forward + backward: 3 x the forward's 2 * k^2 * C_in * C_out * side^2."""
    return 3 * sum(2 * k * k * c_in * c_out * side * side for k, c_in, c_out, side in resnet50_layers(image))


def resnet50_params() -> int:
    """ResNet-50's parameters: every weight, 2 per channel of every batch norm, and the Linear's bias."""
    layers = resnet50_layers()
    return sum(k * k * c_in * c_out for k, c_in, c_out, _ in layers) + 2 * sum(c for *_, c, _ in layers[:-1]) + 1000


# ResNet-50 on ImageNet (224 x 224 images), about 160 modules; C counted as the module docstring says.
EXAMPLE = Workload(params=resnet50_params(), modules=161, batch=256, flops_per_sample=resnet50_flops(),
                   sample_bytes=3 * 224 * 224 * 4)


def formula(kind: Kind = "dp") -> str:
    """The formula for ``kind`` ("single", "dp" or "ddp"), with what every symbol means."""
    return f"{FORMULAS[kind]}\n{SYMBOLS}"


def step_time(kind: Kind, n: int, workload: Workload, hardware: Hardware) -> dict[str, float]:
    """Seconds per training step, one entry per term of ``formula(kind)``; their sum is the step time."""
    if kind not in FORMULAS:
        raise ValueError(f"kind must be 'single', 'dp' or 'ddp', not {kind!r}.")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n is a number of devices, a whole number >= 1; got {n!r}.")
    w, h = workload, hardware
    size = w.params * w.bytes_per_param
    n = 1 if kind == "single" else n
    compute = (w.batch * w.flops / h.flops + n * 3 * size / h.memory_bandwidth) / min(n, h.compute_units)
    python = (n if kind == "dp" else 1) * w.modules * h.module_time
    python = max(0.0, python - compute) if h.asynchronous else python
    if n == 1:
        return {"compute": compute, "python": python, "overhead": h.step_overhead}
    if kind == "dp":
        copies = (1 if h.pipelined else n - 1) * (size / h.bandwidth + h.latency)
        return {"compute": compute, "python": python,
                "replicate": n * w.modules * h.replicate_time + copies, "reduce": copies,
                "scatter": (n - 1) / n * w.batch * w.sample_bytes / h.bandwidth + 2 * h.latency,
                "overhead": h.step_overhead + h.dp_overhead}
    buckets = max(1, math.ceil(size / BUCKET_BYTES))
    allreduce = 2 * (n - 1) / n * size / h.bandwidth + 2 * (n - 1) * buckets * h.latency
    return {"compute": compute, "python": python,
            "allreduce": max(allreduce - 2 / 3 * compute, allreduce / buckets),
            "overhead": h.step_overhead + h.ddp_overhead}


@dataclasses.dataclass
class Speedup:
    """Speed-up ``T_1 / T(n)`` over one device for every n, and where DataParallel stops paying off."""

    hardware: Hardware
    workload: Workload
    devices: list[int]
    dp: list[float]
    ddp: list[float]

    @property
    def dp_best(self) -> int:
        """The number of devices at which DP is fastest: beyond it, every added device makes DP slower."""
        return self.devices[self.dp.index(max(self.dp))]

    @property
    def dp_slower_than_one_device(self) -> int | None:
        """The smallest n >= 2 at which DP is slower than one device (``None`` if it never is)."""
        return next((n for n, s in zip(self.devices, self.dp, strict=True) if n > 1 and s < 1), None)


def predict_speedup(preset: str | Hardware, workload: Workload = EXAMPLE, max_devices: int = 8) -> Speedup:
    """DP's and DDP's speed-up for n = 1..``max_devices``; the batch is global, n devices share it."""
    if isinstance(preset, str) and preset not in PRESETS:
        raise ValueError(f"Unknown preset {preset!r}; choose one of {sorted(PRESETS)} or pass a Hardware.")
    if isinstance(max_devices, bool) or not isinstance(max_devices, int) or max_devices < 1:
        raise ValueError(f"max_devices must be a whole number >= 1 (curves run 1..max_devices), not {max_devices!r}.")
    hardware = PRESETS[preset] if isinstance(preset, str) else preset
    n_values = list(range(1, max_devices + 1))
    single = sum(step_time("single", 1, workload, hardware).values())
    if single == 0:
        raise ValueError(f"{hardware.name!r} takes 0 s per step on one device (infinite rates, no overheads), so "
                         "there is no speed-up to compare; give it a finite rate or an overhead.")
    speedups = {kind: [single / sum(step_time(kind, n, workload, hardware).values()) for n in n_values]
                for kind in ("dp", "ddp")}
    return Speedup(hardware, workload, n_values, speedups["dp"], speedups["ddp"])


@dataclasses.dataclass(frozen=True)
class Setup:
    """One thing to time: the lesson MLP (``hidden`` wide, ``depth`` Linear layers) under DataParallel."""

    hidden: int
    depth: int
    devices: int
    batch: int = 64
    traced: bool = False

    @property
    def model_to_time(self) -> ModelToTime:
        return lesson_mlp(self.hidden, self.depth)

    def workload(self) -> Workload:
        return Workload.of(self.model_to_time.model(), self.batch)


@contextlib.contextmanager
def _one_core() -> Iterator[None]:
    """Run torch, and this whole process, on one core: one intra-op thread, pinned where the OS allows it."""
    cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cores:
        os.sched_setaffinity(0, {min(cores)})
    try:
        with one_thread_per_operation():
            yield
    finally:
        if cores:
            os.sched_setaffinity(0, cores)


def measure(setups: Sequence[Setup], rounds: int = 8, steps: int = 5, clock: Literal["cpu", "wall"] = "cpu",
            device: str = "cpu") -> list[tuple[float, dict[str, float]]]:
    """Time forward + backward of every setup: each one's fastest step, and with ``traced``, its spans.

    Every replica of a setup shares ``device``, where the model and the batch are put before it is wrapped.
    On CPU devices (``device="cpu"``, the real CPU, on a GPU machine too) everything runs on one core. On a
    GPU (``device="cuda:0"``) a step is timed from the moment the GPU is idle to the moment it has finished
    the step's work (``synchronized_clock``), so the launches and the GPU work both count.

    Traced setups also give the fastest time of every span (summed over the replicas). The setups take
    turns, ``steps`` steps each per round, so a busy spell of another program hits them all alike, and the
    fastest step counts: other programs only ever add time. ``clock="cpu"`` counts this process's CPU time:
    on an idle core that is the wall time, and unlike ``clock="wall"`` it does not grow while another program
    holds the core. Span times are wall times, or CUDA event times on a GPU.
    """
    gpu = torch.device(device).type == "cuda"
    now = synchronized_clock([device]) if gpu else time.process_time if clock == "cpu" else time.perf_counter
    runs = []
    for setup in setups:
        module = setup.model_to_time.model().to(device)
        dp = DataParallel(module, devices=[device] * setup.devices)
        x, y = setup.model_to_time.batch(setup.batch, device)
        runs.append((setup, module, dp, x, functools.partial(loss_fn, target=y), [], defaultdict(list)))
    with contextlib.nullcontext() if gpu else _one_core():
        for round_ in range(rounds):
            for setup, module, dp, x, loss, totals, spans in runs:
                for step in range(steps):
                    with trace() if setup.traced else contextlib.nullcontext() as recorded:
                        elapsed = timed_step(dp, module, x, loss, clock=now).seconds
                    if round_ == 0 and step < 2:  # warm-up
                        continue
                    totals.append(elapsed)
                    for name in {s.step for s in recorded.spans} if setup.traced else ():
                        spans[name].append(sum(s.duration for s in recorded.steps(name)))
    return [(min(totals), {name: min(values) for name, values in spans.items()}) for *_, totals, spans in runs]


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
    singles = [Setup(h, d, 1, b) for h, d in sizes for b in batches]
    traced = [Setup(h, d, n, traced=True) for h, d in sizes for n in dp_devices]
    fitted = [Setup(h, d, n) for h, d in sizes for n in dp_devices]
    held_out = [Setup(h, d, n) for h, d in check for n in (1, 2)]
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
    rest = [t - sum(step_time("dp", s.devices, s.workload(), hardware).values())
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
              "predicted": sum(step_time("dp", s.devices, s.workload(), hardware).values()),
              "used": "fitted" if i < len(fitted) else "held out"}
             for i, (s, t) in enumerate(zip([*fitted, *held_out], [*fitted_seconds, *held_out_seconds], strict=True))]
    return Calibration(hardware, table)


def fit_gpu(measured: Sequence[dict], copy_bandwidth: float, name: str, sources: str) -> Calibration:
    """Fit one GPU's terms from ``costmodel.measure`` rows taken on it (``dpcourse.recording`` keeps them).

    Each row is a ``Setup``'s fields plus ``seconds`` (its fastest step) and ``spans``. Every replica shares
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
    rows = [(Setup(r["hidden"], r["depth"], r["devices"], r["batch"], r["traced"]), r) for r in measured]
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
