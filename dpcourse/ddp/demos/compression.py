"""DDP's gradient-compression hooks: all-reduce in float16 or bfloat16, and the error that costs, measured.

``fp16_compress_hook`` and ``bf16_compress_hook`` (``torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py``,
``_compress_hook``) cast each bucket to 16 bits, divide it by the number of ranks, all-reduce the 16-bit copy
(half the bytes) and copy the sum back into the float32 bucket. The gradient every rank ends with is rounded
twice: each rank's share, then the sum.

Whether DDP accepts ``bf16_compress_hook`` depends on how torch was *built*, not on the backend or the device:
``_check_comm_hook`` (``torch/nn/parallel/distributed.py:2485-2503`` in torch 2.13) recognises the hook by its
name and accepts it when torch is a CUDA or ROCm build (``torch.version.cuda`` or ``torch.version.hip`` set) with
NCCL 2.10 or later compiled in, or an XPU build with XCCL. A CUDA build accepts it on gloo with a CPU module; a
CPU-only build refuses it everywhere. ``bf16_build_check`` reads the same facts. gloo adds bfloat16 tensors on
every build, so the course measures bfloat16 with ``compressed_allreduce(torch.bfloat16)``: the same steps as
torch's hook, under another name. ``compressed_allreduce(torch.float16)`` gives exactly ``fp16_compress_hook``'s result
(a test checks it).
"""

import dataclasses
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from dpcourse.precision import gradient_errors

from ...examples import flat_grad, make_model, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..per_rank import shard, wrap

Hook = Callable[[dist.ProcessGroup | None, dist.GradBucket], torch.futures.Future[torch.Tensor]]
HOOKS = ("none", "fp16_compress_hook", "bf16, dpcourse's copy")  # what ``compression()`` compares by default


def compressed_allreduce(dtype: torch.dtype) -> Hook:
    """A DDP communication hook that all-reduces each bucket in ``dtype``, as ``_compress_hook`` does."""

    def hook(process_group: dist.ProcessGroup | None, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        group = process_group if process_group is not None else dist.group.WORLD
        buffer = bucket.buffer()
        compressed = buffer.to(dtype).div_(group.size())  # divide first: the sum of the shares cannot overflow

        def decompress(future: torch.futures.Future) -> torch.Tensor:
            return buffer.copy_(future.value()[0])  # back to float32, in place

        return dist.all_reduce(compressed, group=group, async_op=True).get_future().then(decompress)

    return hook


def _hooks() -> dict[str, Hook | None]:
    """Every hook ``compression`` knows, by name; ``"none"`` is DDP's own all-reduce."""
    return {"none": None, "fp16_compress_hook": default_hooks.fp16_compress_hook,
            "fp16, dpcourse's copy": compressed_allreduce(torch.float16),
            "bf16, dpcourse's copy": compressed_allreduce(torch.bfloat16)}


def bf16_build_check() -> dict[str, object]:
    """What DDP's check on ``bf16_compress_hook`` reads about this torch build, and whether it passes.

    The same conditions as ``_check_comm_hook`` (``torch/nn/parallel/distributed.py:2485-2503``, torch 2.13):
    no backend, no device, only how torch was built (and, for XPU, whether an XPU is there).
    """
    nccl = dist.is_available() and dist.is_nccl_available()
    nccl_version = torch.cuda.nccl.version() if nccl else None
    cuda_build = torch.version.cuda is not None or torch.version.hip is not None
    xpu = dist.is_available() and dist.is_xccl_available() and torch.xpu.is_available()
    return {"torch": torch.__version__, "torch.version.cuda": torch.version.cuda,
            "torch.version.hip": torch.version.hip, "NCCL compiled in": nccl, "NCCL version": nccl_version,
            "XPU with XCCL": xpu,
            "passes": bool((cuda_build and nccl and nccl_version >= (2, 10)) or xpu)}


def _bf16_hook_outcome() -> str:
    """What DDP says when ``bf16_compress_hook`` is registered on this rank (gloo): "accepted" or its error."""
    try:
        wrap(make_model(), device()).register_comm_hook(None, default_hooks.bf16_compress_hook)
    except (TypeError, RuntimeError) as error:
        return f"{type(error).__name__}: {error}"
    return "accepted"


def _gradients(batch: int, multipliers: list[float], hooks: list[str]) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    x, y = regression_batch(batch)
    mine = shard(batch, rank, world)
    grads = {}
    for multiplier in multipliers:
        for name in hooks:
            ddp_model, hook = wrap(make_model(), here), _hooks()[name]
            if hook is not None:
                ddp_model.register_comm_hook(None, hook)
            (regression_loss(ddp_model(x[mine].to(here)), y[mine].to(here)) * multiplier).backward()
            grads[(multiplier, name)] = flat_grad(ddp_model.module)
    return {"grads": grads, "bf16_compress_hook": _bf16_hook_outcome()}


def _multiplier(value: float) -> str:
    """``2**16`` for a power of two from 2 up, else ``1`` or ``1e-06``."""
    exponent = torch.tensor(value).log2().item()
    return f"2**{exponent:.0f}" if value >= 2 and exponent.is_integer() else f"{value:g}"


@dataclasses.dataclass
class Compression:
    """Rank 0's all-reduced gradient under each hook, for the loss times each multiplier; and DDP's word on bf16.

    ``bf16_compress_hook`` is "accepted" or the error DDP raised when rank 0 registered it (on gloo)."""

    grads: dict[tuple[float, str], torch.Tensor]
    ranks_agree: bool
    bf16_compress_hook: str

    @property
    def rows(self) -> list[dict]:
        """One row per (multiplier, compressing hook): its errors against the uncompressed all-reduce."""
        rows = []
        for (multiplier, name), got in self.grads.items():
            if name != "none":
                exact = self.grads[(multiplier, "none")]
                rows.append({"multiplier": multiplier, "hook": name, "largest": exact.abs().max().item(),
                             **gradient_errors(exact, got)})
        return rows

    def __str__(self) -> str:
        lines = [f"{'loss x':>7} {'max |g|':>8}  {'hook':<22} {'max |error|':>11} {'max |error| / max |g|':>21}"
                 f" {'became 0':>8} {'inf/nan':>7}"]
        for row in self.rows:
            lines.append(f"{_multiplier(row['multiplier']):>7} {row['largest']:>8.1e}  {row['hook']:<22} "
                         f"{row['max_abs_error']:>11.1e} {row['relative_error']:>21.1e} {row['lost']:>8.0%} "
                         f"{row['not_finite']:>7}")
        return "\n".join(lines)


def compression(world_size: int = 2, batch: int = 16, multipliers: Sequence[float] = (1.0, 1e-6, 2.0**16, 2.0**24),
                hooks: Sequence[str] = HOOKS) -> Compression:
    """One backward per (loss multiplier, hook) on ``world_size`` gloo ranks, each on its shard of ``batch`` rows.

    ``hooks`` name the communication: ``"none"`` (DDP's own all-reduce, the reference), ``"fp16_compress_hook"``
    (torch's), ``"fp16, dpcourse's copy"`` and ``"bf16, dpcourse's copy"`` (``compressed_allreduce``). The loss
    multipliers scale every gradient: 1 as it is, 1e-6 small gradients, 2**16 GradScaler's default scale.
    """
    if "none" not in hooks or not set(hooks) <= set(_hooks()):
        raise ValueError(f"hooks {list(hooks)}: include 'none' (the reference) and choose the others from "
                         f"{[name for name in _hooks() if name != 'none']}.")
    results = launch(_gradients, world_size, (batch, list(multipliers), list(hooks)))
    agree = all(torch.allclose(r["grads"][key], results[0]["grads"][key], rtol=0, atol=0, equal_nan=True)
                for r in results for key in r["grads"])
    return Compression(results[0]["grads"], agree, results[0]["bf16_compress_hook"])
