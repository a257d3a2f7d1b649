"""The cost model itself: what is trained (``Workload``), on what (``Hardware``), and a step's time term by term.

``formula(kind)`` gives the model as text, ``step_time(kind, n, workload, hardware)`` every term separately (a
widget can stack them). A teaching model: each term is one line of the formula, not a simulation.
"""

import dataclasses
import math

from torch import nn

from ..training_setup import KINDS
from . import flops

# One formula per kind of training_setup.KINDS, keyed by its name. FSDP is ZeRO-3 (see ZeRO-3's formula).
FORMULAS = {
    "one device": "T_1 = B * C / F + 3S / mu  (compute)  +  M * o  (python)  +  h  (overhead)",
    "DataParallel": """\
T_DP(N) = compute    (B * C / F + N * 3S / mu) / min(N, U)  the batch's FLOPs; each replica reads the weights 3x
        + python     N * M * o                          every replica's modules, one at a time (one GIL)
        + replicate  N * M * r + c(N) * (S/beta + alpha)  build N replicas, copy the S parameter bytes
        + reduce     c(N) * (S/beta + alpha)            sum the gradients onto device 0
        + scatter    (N-1)/N * B * x / beta + 2 * alpha  inputs out, outputs back to device 0
        + overhead   h + h_dp                           threads, autograd bookkeeping
c(N) = N-1 copies one after another, or 1 when they are pipelined (NCCL broadcast and reduce). N = 1 is T_1.""",
    "DDP": """\
T_DDP(N) = compute    (B * C / F + N * 3S / mu) / min(N, U)  each process: B/N samples, all the weights
         + python     M * o                             one replica per process, all in parallel
         + allreduce  max(A - 2/3 * compute, A / k)     what backward does not hide; the last bucket never is
         + overhead   h + h_ddp
A = 2 (N-1)/N * S/beta + 2 (N-1) k * alpha: a ring all-reduce of S bytes in k = ceil(S / 25 MiB) buckets.""",
    "ZeRO-1": """\
T_ZeRO-1,2(N) = compute         (B * C / F + N * 3S / mu) / min(N, U)  as DDP: B/N samples per rank
              + python          M * o
              + reduce_scatter  max(G - 2/3 * compute, G / k)   gradients: each rank gets the sum of its shard,
                                                                hidden behind backward but for the last bucket
              + all_gather      G                               the updated shards, after the optimizer step
              + overhead        h + h_ddp
G = (N-1)/N * S/beta + (N-1) k * alpha: a ring reduce-scatter or all-gather of S bytes in k buckets; together
2 (N-1)/N * S, DDP's all-reduce (a ring all-reduce is a reduce-scatter, then an all-gather). ZeRO-1 and ZeRO-2
send the same bytes and differ in memory (zero_memory): ZeRO-1 as the ZeRO paper runs it (its section 7.2.1).
Not modelled here, 3 (N-1)/N * S, 1.5 x DDP's: lesson 18's first ZeRO-1 (all-reduce, then all-gather) and torch's
ZeroRedundancyOptimizer under DDP (all-reduce, then each parameter broadcast by its owner); lesson 18 counts all.""",
    "ZeRO-3": """\
T_ZeRO-3(N) = compute         (B * C / F + N * 3S / mu) / min(N, U)  as DDP: B/N samples per rank
            + python          M * o
            + forward_gather  max(G - compute / 3, G / k)   each unit's parameters before its forward
            + backward_comm   max(2G - 2/3 * compute, 2G / k)  all-gather again before each unit's backward,
                                                              reduce-scatter its gradients after it
            + overhead        h + h_ddp
G as for ZeRO-1: all-gather, all-gather, reduce-scatter = 3 (N-1)/N * S, 1.5 x DDP's all-reduce; k units
(here the buckets of 25 MiB). FSDP2 (fully_shard) is ZeRO-3; with reshard_after_forward=False it is not ZeRO-2:
it shards the parameters too, and keeps each layer's gathered between its forward and its backward.""",
}
FORMULAS["ZeRO-2"] = FORMULAS["ZeRO-1"]
SYMBOLS = """\
B batch, C FLOPs per sample, forward + backward (3 x the forward less the first layer's: costmodel.flops), P parameters,
S = P * bytes per parameter, M modules, x input + output bytes per sample, F FLOP/s of one device,
mu its memory bytes/s, U devices that compute at the same time, beta link bytes/s, alpha seconds per transfer,
o Python seconds per module call (forward + backward), r seconds to replicate one module,
h every step's fixed cost, h_dp and h_ddp what DP and DDP add to it.
On a GPU, Python only queues the kernels, so the python term counts only what the GPU does not hide:
max(0, python - compute)."""
DDP_BUCKET_BYTES = 25 * 2**20  # DDP all-reduces gradients in buckets of bucket_cap_mb=25 MiB by default


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
    flops_per_sample: float = 0.0  # 0: 6 * params, an upper bound for a stack of Linear layers (costmodel.flops)
    bytes_per_param: int = 4
    sample_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("params", "modules", "batch", "bytes_per_param"):
            _whole(self, name, 1)
        _whole(self, "sample_bytes", 0)
        _amount(self, "flops_per_sample", positive=False)  # 0 means 6 * params

    @classmethod
    def of(cls, module: nn.Module, batch: int, sample_bytes: int = 0) -> "Workload":
        """``module``'s workload, its FLOPs per sample counted by torch (``flops.counted``; an MLP's input is its
        first Linear's features)."""
        params = list(module.parameters())
        size = params[0].element_size() if params else 4
        per_sample = flops.counted(module, (1, flops.first_linear_features(module)))
        return cls(sum(p.numel() for p in params), len(list(module.modules())), batch, per_sample, size, sample_bytes)

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


def formula(kind: str = "DataParallel") -> str:
    """The formula for ``kind`` (one of ``KINDS``), with what every symbol means."""
    _known(kind)
    return f"{FORMULAS[kind]}\n{SYMBOLS}"


def _known(kind: object) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, not {kind!r}.")


def step_time(kind: str, n: int, workload: Workload, hardware: Hardware) -> dict[str, float]:
    """Seconds per training step of ``kind`` (one of ``KINDS``) on ``n`` devices, one entry per term of
    ``formula(kind)``; their sum is the step time.

    Raises ``ValueError`` when a workload is so large that its step overflows floating point (more than about
    1.8e308 FLOPs or seconds): no answer would be a number.
    """
    _known(kind)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n is a number of devices, a whole number >= 1; got {n!r}.")
    try:
        terms = _terms(kind, n, workload, hardware)
    except OverflowError:  # a Python int too large for a float
        terms = {"compute": math.inf}
    if not all(math.isfinite(value) for value in terms.values()):
        raise ValueError(f"{workload} is too large to predict: its step overflows floating point (batch x FLOPs per "
                         f"sample or the parameter bytes above about 1e308). Use a real model's size.")
    return terms


def _terms(kind: str, n: int, workload: Workload, hardware: Hardware) -> dict[str, float]:
    w, h = workload, hardware
    size = w.params * w.bytes_per_param
    n = 1 if kind == "one device" else n
    compute = (w.batch * w.flops / h.flops + n * 3 * size / h.memory_bandwidth) / min(n, h.compute_units)
    python = (n if kind == "DataParallel" else 1) * w.modules * h.module_time
    python = max(0.0, python - compute) if h.asynchronous else python
    if n == 1:
        return {"compute": compute, "python": python, "overhead": h.step_overhead}
    if kind == "DataParallel":
        copies = (1 if h.pipelined else n - 1) * (size / h.bandwidth + h.latency)
        return {"compute": compute, "python": python,
                "replicate": n * w.modules * h.replicate_time + copies, "reduce": copies,
                "scatter": (n - 1) / n * w.batch * w.sample_bytes / h.bandwidth + 2 * h.latency,
                "overhead": h.step_overhead + h.dp_overhead}
    buckets = max(1, math.ceil(size / DDP_BUCKET_BYTES))
    gather = (n - 1) / n * size / h.bandwidth + (n - 1) * buckets * h.latency  # a ring all-gather or reduce-scatter
    common = {"compute": compute, "python": python}
    if kind == "DDP":
        allreduce = 2 * (n - 1) / n * size / h.bandwidth + 2 * (n - 1) * buckets * h.latency  # = 2 * gather
        communication = {"allreduce": max(allreduce - 2 / 3 * compute, allreduce / buckets)}
    elif kind in ("ZeRO-1", "ZeRO-2"):
        communication = {"reduce_scatter": max(gather - 2 / 3 * compute, gather / buckets), "all_gather": gather}
    else:
        communication = {"forward_gather": max(gather - compute / 3, gather / buckets),
                         "backward_comm": max(2 * gather - 2 / 3 * compute, 2 * gather / buckets)}
    return common | communication | {"overhead": h.step_overhead + h.ddp_overhead}


