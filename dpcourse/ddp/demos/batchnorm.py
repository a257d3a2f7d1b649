"""One DDP training step with BatchNorm, per replica and synchronised, next to one device with the whole batch.

The model is ``Linear(8, 4) -> BatchNorm(4)``; the batch's second half is shifted and stretched, so the two
ranks' shards have different statistics, as shards of data sorted by class or by source do.
``batchnorm()`` trains one step on each rank's half with ``nn.BatchNorm1d`` (each rank its own statistics)
and with ``SyncBatchNorm1d`` (the global batch's), and tries torch's ``nn.SyncBatchNorm`` on the CPU.
"""

import dataclasses

import torch
import torch.distributed as dist
from torch import nn

from dpcourse import examples

from ...examples import flat_weights, gap, max_difference, regression_batch, regression_loss
from ...ranks.launcher import device, launch
from ..implementations.syncbn import SyncBatchNorm1d, global_stats
from ..per_rank import wrap

KINDS = {"per-replica BatchNorm1d": nn.BatchNorm1d, "SyncBatchNorm1d": SyncBatchNorm1d}


def bn_model(norm: type[nn.Module] = nn.BatchNorm1d) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 4), norm(4))


def skewed_data(batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The lesson data with its second half scaled by 2 and shifted by 1: two halves, two distributions."""
    x, y = regression_batch(batch)
    x[batch // 2 :] = 2 * x[batch // 2 :] + 1
    return x, y


def _one_step(module: nn.Module, x: torch.Tensor, y: torch.Tensor, norm: nn.Module, lr: float = 0.1) -> dict:
    """One plain SGD step (``examples.sgd_step``: ``torch.optim`` would import ``torch._dynamo`` into the notebook)."""
    output = module(x)
    regression_loss(output, y).backward()
    examples.sgd_step(module, lr)
    return {"running_mean": norm.running_mean.clone().cpu(), "running_var": norm.running_var.clone().cpu(),
            "output": output.detach().cpu(), "weights": flat_weights(module)}


def _batchnorm(batch: int) -> dict:
    rank, world, here = dist.get_rank(), dist.get_world_size(), device()
    x, y = skewed_data(batch)
    rows = slice(rank * batch // world, (rank + 1) * batch // world)
    x, y = x[rows].to(here), y[rows].to(here)
    result = {}
    for name, norm in KINDS.items():
        module = bn_model(norm).to(here)
        result[name] = _one_step(wrap(module, here), x, y, module[1])
    try:
        nn.SyncBatchNorm(4).to(here)(x)
        result["torch SyncBatchNorm"] = "ran"
    except ValueError as error:
        result["torch SyncBatchNorm"] = f"ValueError: {error}"
    return result


def single_device(batch: int = 16) -> dict:
    """The reference: the same step on one device, ``nn.BatchNorm1d`` seeing the whole batch."""
    module = bn_model()
    return _one_step(module, *skewed_data(batch), module[1])


@dataclasses.dataclass
class BatchNormStep:
    """Each rank's running statistics, output and weights after one step, per kind, and the one-device reference."""

    ranks: list[dict]
    reference: dict

    def diff(self, kind: str, what: str) -> list[float]:
        """Per rank: max |rank's ``what`` - one device's|. For ``"output"``, the rank's rows of the reference."""
        rows = self.reference["output"].tensor_split(len(self.ranks))
        found = [r[kind][what] for r in self.ranks]  # a rank's result came back from its process: compare there
        return [max_difference(f, (rows[i] if what == "output" else self.reference[what]).to(f.device))
                for i, f in enumerate(found)]

    def __str__(self) -> str:
        def row(name: str, values: torch.Tensor) -> str:
            return f"{name:<34}" + "".join(f"{v:>9.4f}" for v in values.tolist())

        lines = ["running_mean after one step, channels 0-3:",
                 row("one device, whole batch", self.reference["running_mean"])]
        for kind in KINDS:
            lines += [row(f"{kind}, rank {i}", r[kind]["running_mean"]) for i, r in enumerate(self.ranks)]
        lines.append("max |difference from one device with the whole batch| per rank:")
        for kind in KINDS:
            numbers = ", ".join(f"{what} {[gap(d) for d in self.diff(kind, what)]}"
                                for what in ("running_mean", "running_var", "output", "weights"))
            lines.append(f"  {kind}: {numbers}")
        lines.append(f"torch's nn.SyncBatchNorm on the CPU: {self.ranks[0]['torch SyncBatchNorm']}")
        return "\n".join(lines)


def batchnorm(world_size: int = 2, batch: int = 16) -> BatchNormStep:
    """One DDP step per kind of BatchNorm on ``world_size`` ranks, each on its contiguous share of the batch."""
    return BatchNormStep(launch(_batchnorm, world_size, (batch,)), single_device(batch))


def _global_stats(shards: list[list[float]]) -> list[float]:
    mean, variance, count = global_stats(torch.tensor(shards[dist.get_rank()])[:, None])
    return [mean.item(), variance.item(), count.item()]


def global_variance(shards: list[list[float]]) -> dict[str, float]:
    """The global mean and biased variance of one channel whose values on rank ``r`` are ``shards[r]``,
    combined on real ranks as ``SyncBatchNorm1d`` does."""
    mean, variance, count = launch(_global_stats, len(shards), ([list(map(float, s)) for s in shards],))[0]
    return {"mean": mean, "variance": variance, "count": count}


def _against_torch(batch: int) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    gpu = torch.device("cuda", rank % torch.cuda.device_count())
    x, _ = skewed_data(batch)
    mine = x[rank * batch // world : (rank + 1) * batch // world].to(gpu)
    result = {}
    for name, norm in (("torch", nn.SyncBatchNorm(8)), ("dpcourse", SyncBatchNorm1d(8))):
        norm = norm.to(gpu)
        output = norm(mine)
        result[name] = {"output": output.detach().cpu(), "running_mean": norm.running_mean.cpu(),
                        "running_var": norm.running_var.cpu()}
    return result


def against_torch(world_size: int = 2, batch: int = 16) -> list[dict]:
    """Needs a GPU: torch's ``nn.SyncBatchNorm`` and ``SyncBatchNorm1d`` on the same shards, one forward each.

    Every rank uses GPU ``rank % device_count``: with one GPU both ranks share it, and the process group is
    gloo, whose all-gather takes CUDA tensors too.
    """
    return launch(_against_torch, world_size, (batch,))
