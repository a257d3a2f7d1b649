"""Programs that end badly on real ranks, for tests/test_ranks_failures.py: the reliability battery's cases.

They live apart from the tests so that a rank, which imports a program by its module's name, imports only this
small module. Each is a training program for ``ranks.train_on_ranks`` (``model, batches, lr``) or a worker for
``ranks.launch`` (no arguments); rank 1 misbehaves while rank 0 waits in a collective.
"""

import os
import sys

import torch
import torch.distributed as dist


def _gather() -> None:
    dist.all_gather([torch.empty(2) for _ in range(dist.get_world_size())], torch.ones(2))


def rank_1_skips_the_all_gather(model, batches, lr):
    if dist.get_rank() == 0:
        _gather()
    return list(model.parameters())


def rank_1_calls_exit(model, batches, lr):
    if dist.get_rank() == 1:
        sys.exit(0)
    _gather()
    return list(model.parameters())


def every_rank_calls_exit(model, batches, lr):
    sys.exit(0)


def rank_1_os_exit(code: int) -> int:
    if dist.get_rank() == 1:
        os._exit(code)
    _gather()
    return 0


def rank_1_interrupted(model, batches, lr):
    if dist.get_rank() == 1:
        raise KeyboardInterrupt
    _gather()
    return list(model.parameters())


def never_returns() -> int:
    while True:
        pass


def returns_rank() -> int:
    return dist.get_rank()
