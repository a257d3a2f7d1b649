"""Train the running example with DistributedDataParallel: one process per device, each on its share of every batch.

    torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --epochs 2 --out ddp.pt
    python -m dpcourse.scripts.train_ddp --nproc 2 --epochs 2 --out ddp.pt     # runs that torchrun itself

torchrun starts the processes and sets RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous address. A rank takes GPU
number LOCAL_RANK when every rank on this machine has a GPU of its own, and NCCL; otherwise (2 ranks on one GPU,
or no GPU) every rank runs on the CPU with gloo, since NCCL needs one GPU per rank. ``dpcourse.ddp``'s docstring
has the commands for several machines.

At the end rank 0 checks the result: it trains the same batches, each whole, on one device (``train_dp.train``
on one device) and prints how far apart the weights are. The exit status is 0 when they agree to float
rounding, as they do whenever the number of ranks divides ``BATCH``.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from dpcourse.examples import make_model, max_weight_difference, regression_loss
from dpcourse.ranks import backend_for
from dpcourse.ranks.torchrun import torchrun
from dpcourse.scripts import train_dp
from dpcourse.scripts.common import BATCH, LR, SEED, make_dataset


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start when not started by torchrun")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="ddp.pt", help="where to save the trained weights")
    return parser.parse_args(argv)


def train(device: torch.device, epochs: int) -> nn.Module:
    """``epochs`` of SGD, this rank on its share of every batch; rank 0 prints each epoch's last loss, averaged."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(make_model().to(device), device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, seed=SEED)  # this rank's share, reshuffled by set_epoch
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(dataset, batch_size=BATCH // world_size, sampler=sampler):
            optimizer.zero_grad()
            loss = regression_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        shown = loss.detach().clone()
        dist.all_reduce(shown)  # rank 0's loss covers its own share only: average every rank's
        if rank == 0:
            print(f"epoch {epoch}: loss of the last batch {shown.item() / world_size:.4f}", flush=True)
    return model.module


def matches_one_device(model: nn.Module, device: torch.device, epochs: int) -> bool:
    """Train the same batches whole on ``device`` alone and compare the weights: DDP must change nothing else."""
    print("\nthe same batches, each whole, on one device (train_dp.train):", flush=True)
    apart = max_weight_difference(model, train_dp.train([device], epochs))
    print(f"max |w_DDP - w_one_device| over all weights: {apart:.1e}", flush=True)
    return apart <= 1e-6


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if "RANK" not in os.environ:  # not started by torchrun: run torchrun, which starts the ranks
        ran = torchrun("dpcourse.scripts.train_ddp", ["--epochs", str(args.epochs), "--out", args.out],
                       nproc=args.nproc, timeout=600)
        print(ran.stdout, end="")
        print(ran.stderr, end="", file=sys.stderr)
        return ran.returncode
    rank, world_size, local_rank = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    backend = backend_for(int(os.environ["LOCAL_WORLD_SIZE"]))  # "nccl" only if every local rank has a GPU
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    if rank == 0:
        print(f"{world_size} ranks, backend {backend}, rank 0 on {device}", flush=True)
    model = train(device, args.epochs)
    agrees = True
    if rank == 0:
        torch.save(model.state_dict(), args.out)
        agrees = matches_one_device(model, device, args.epochs)
    dist.barrier()  # nobody reads the checkpoint, or leaves, before rank 0 has written it
    dist.destroy_process_group()
    return 0 if agrees else 1


if __name__ == "__main__":
    sys.exit(main())
