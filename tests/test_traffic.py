"""ranks.traffic: each collective a program calls, once, with the size of the whole collective; and swapped, which
puts back every function it replaced, whatever happens inside its block."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

from dpcourse.ranks.traffic import counted, swapped


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


# swapped: the one way the course replaces torch.distributed's functions for a while.

def test_swapped_replaces_in_both_modules_and_puts_back_what_each_held():
    torch_all_gather, torch_reduce_scatter = dist.all_gather, dist.reduce_scatter
    with swapped({"all_gather": torch.cat, "reduce_scatter": torch.stack}):
        assert dist.all_gather is distributed_c10d.all_gather is torch.cat
        assert dist.reduce_scatter is distributed_c10d.reduce_scatter is torch.stack
        with swapped({"all_gather": len}):  # nested: the inner block ends with the outer's replacement
            assert dist.all_gather is len
        assert dist.all_gather is torch.cat
    assert dist.all_gather is distributed_c10d.all_gather is torch_all_gather
    assert dist.reduce_scatter is distributed_c10d.reduce_scatter is torch_reduce_scatter


def test_swapped_puts_back_each_modules_own_function(monkeypatch):
    monkeypatch.setattr(distributed_c10d, "all_gather", len)  # already replaced in one module only
    torch_all_gather = dist.all_gather
    with pytest.raises(KeyError), swapped({"all_gather": torch.cat}):
        raise KeyError("inside")
    assert (dist.all_gather, distributed_c10d.all_gather) == (torch_all_gather, len)


def test_swapped_names_a_function_torch_distributed_does_not_have():
    with pytest.raises(AttributeError, match="torch.distributed has no all_gathr"), swapped({"all_gathr": len}):
        pass
    assert not hasattr(dist, "all_gathr")


def test_counted_puts_the_process_groups_methods_back_after_an_exception():
    group_methods = {name: vars(dist.ProcessGroup)[name] for name in ("send", "recv", "recv_anysource")}
    wait, all_reduce = dist.Work.wait, dist.all_reduce
    with pytest.raises(KeyError), counted():
        raise KeyError("inside")
    assert {name: vars(dist.ProcessGroup)[name] for name in group_methods} == group_methods
    assert (dist.Work.wait, dist.all_reduce, distributed_c10d.all_reduce) == (wait, all_reduce, all_reduce)
