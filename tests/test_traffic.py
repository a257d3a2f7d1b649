"""ranks.traffic: each collective a program calls, once, with the size of the whole collective."""

import torch
import torch.distributed as dist

from dpcourse.ranks.traffic import counted


def test_each_collective_is_recorded_once_with_the_bytes_of_its_largest_tensor():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)  # one rank, in this process
    try:
        with counted() as traffic:
            dist.all_reduce(torch.zeros(4))
            dist.all_gather([torch.zeros(3)], torch.zeros(3))
            dist.all_gather_into_tensor(torch.zeros(5), torch.zeros(5))  # calls all_gather_single inside
            dist.barrier()
    finally:
        dist.destroy_process_group()
    assert traffic.calls == [("all_reduce", 16), ("all_gather", 12), ("all_gather_into_tensor", 20)]
    assert traffic.collectives == ["all_reduce", "all_gather", "all_gather_into_tensor"]
    assert (traffic.sent, traffic.received) == (0, 0)
    assert dist.all_reduce.__name__ == "all_reduce"  # the real functions are back
