"""Train the lesson model with DistributedDataParallel and compare it with single-device training.

Run it either way; the ranks run the same code (``dpcourse.ddp.demos.equivalence._training``)::

    python -m dpcourse.ddp_train --nproc 2 --steps 3                      # dpcourse starts the ranks
    torchrun --standalone --nproc_per_node=2 -m dpcourse.ddp_train --steps 3   # torchrun starts them

Under torchrun (it sets ``RANK`` and ``WORLD_SIZE``) every process is one rank: each prints a line, and
rank 0 gathers the others' results and prints the comparison. ``dpcourse.ddp``'s docstring has the
commands for several machines.
"""

import argparse
import os
import sys

import torch.distributed as dist

from dpcourse.ddp.demos.equivalence import Training, _training, train
from dpcourse.ddp.example import single_device
from dpcourse.ddp.processes.launcher import init_from_env


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m dpcourse.ddp_train", description=__doc__.split("\n")[0])
    parser.add_argument("--nproc", type=int, default=2, help="ranks to start when not run by torchrun")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16, help="global batch, split among the ranks")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--local-rank", "--local_rank", type=int, help=argparse.SUPPRESS)  # older launchers
    return parser.parse_args(argv)


def _report(result: Training, launcher: str, args: argparse.Namespace) -> int:
    """Print the comparison with single-device training; 0 if every rank's weights match it, else 1."""
    print(f"{len(result.ranks)} ranks started by {launcher}, {args.steps} steps, global batch {args.batch}")
    print(result, flush=True)
    return 0 if result.matches_single_device() else 1


def _under_torchrun(args: argparse.Namespace) -> int:
    init_from_env()
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = _training(args.steps, args.batch, args.lr)
    print(f"[rank {rank}/{world} pid {os.getpid()}] {mine['device']}, {mine['backend']}: "
          f"last local loss {mine['losses'][-1]:.4f}", flush=True)
    ranks = [None] * world if rank == 0 else None
    dist.gather_object(mine, ranks, dst=0)
    code = 0
    if rank == 0:
        code = _report(Training(ranks, single_device(args.steps, args.batch, args.lr)["weights"]), "torchrun", args)
    dist.barrier()  # everything is printed, and no rank uses the group any more, before any rank tears down
    dist.destroy_process_group()
    return code


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return _under_torchrun(args)
    return _report(train(args.nproc, args.steps, args.batch, args.lr), "dpcourse.ddp.launch", args)


if __name__ == "__main__":
    sys.exit(main())
