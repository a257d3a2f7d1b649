"""Train a small MLP with DistributedDataParallel: one process per device, each on its share of every batch.

    torchrun --standalone --nproc_per_node=2 -m dpcourse.scripts.train_ddp --epochs 2 --out ddp.pt

torchrun starts the processes and sets RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous address. A rank takes
GPU number LOCAL_RANK when every rank on this machine has a GPU of its own, and NCCL; otherwise (2 ranks on
one GPU, or no GPU) every rank runs on the CPU with gloo, since NCCL needs one GPU per rank.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from dpcourse.ddp.processes.launcher import backend_for
from dpcourse.scripts.common import BATCH, LR, SEED, make_dataset, make_model


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--out", default="ddp.pt", help="where to save the trained weights")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    rank, world_size, local_rank = (int(os.environ[name]) for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    backend = backend_for(int(os.environ["LOCAL_WORLD_SIZE"]))  # "nccl" only if every local rank has a GPU
    device = torch.device("cuda", local_rank) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend)
    if rank == 0:
        print(f"{world_size} ranks, backend {backend}, rank 0 on {device}", flush=True)
    model = DistributedDataParallel(make_model().to(device), device_ids=[device] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, seed=SEED)  # this rank's share, reshuffled by set_epoch
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(dataset, batch_size=BATCH // world_size, sampler=sampler):
            optimizer.zero_grad()
            loss = F.mse_loss(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
        shown = loss.detach().clone()
        dist.all_reduce(shown)  # rank 0's loss covers its own share only: average every rank's
        if rank == 0:
            print(f"epoch {epoch}: loss of the last batch {shown.item() / world_size:.4f}", flush=True)
    if rank == 0:
        torch.save(model.module.state_dict(), args.out)
    dist.barrier()  # nobody reads the checkpoint, or leaves, before rank 0 has written it
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
