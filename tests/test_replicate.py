"""replicate: shallow copies, non-leaf parameter copies, replica-0 aliasing, shared attributes."""

import pytest
import torch
from torch import nn

import dpcourse
from dpcourse.by_hand import tensor_at
from dpcourse.comm import BROADCAST_BUCKET_BYTES, buckets


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.bn = nn.BatchNorm1d(3)
        self.counter = 0
        self.log = []
        self.plain = torch.zeros(2)

    def forward(self, x):
        self.counter += 1
        self.log.append(x.shape[0])
        return self.bn(self.fc(x))


def test_replicas_have_no_parameters_but_non_leaf_copies():
    net = Counting()
    replicas = dpcourse.replicate(net, dpcourse.devices(3))
    assert len(replicas) == 3
    for replica in replicas:
        assert replica._is_replica and list(replica.parameters()) == []
        assert replica.fc.weight.grad_fn is not None and not replica.fc.weight.is_leaf
        assert set(replica.state_dict()) == {"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"}


def test_replica_zero_aliases_the_original_others_are_copies():
    net = Counting()
    r0, r1 = dpcourse.replicate(net, dpcourse.devices(2))
    assert r0.fc.weight._base is net.fc.weight
    assert r0.bn.running_mean is net.bn.running_mean
    assert r1.fc.weight.data_ptr() != net.fc.weight.data_ptr()
    assert r1.bn.running_mean is not net.bn.running_mean
    assert torch.equal(r1.fc.weight, net.fc.weight) and torch.equal(r1.bn.running_var, net.bn.running_var)


def test_detach_gives_replica_zero_the_original_parameters():
    net = Counting()
    with torch.no_grad():
        r0, r1 = dpcourse.replicate(net, dpcourse.devices(2), detach=True)
    assert r0.fc.weight is net.fc.weight and len(list(r0.parameters())) == 4
    assert not r1.fc.weight.requires_grad and list(r1.parameters()) == []


def test_plain_attributes_are_shared_by_reference():
    net = Counting()
    r0, r1 = dpcourse.replicate(net, dpcourse.devices(2))
    assert r0.log is net.log and r1.log is net.log
    assert r1.plain is net.plain  # a plain tensor attribute is not copied: register it as a buffer
    assert r0._forward_hooks is net._forward_hooks


def test_counter_update_is_lost_with_two_devices_and_kept_with_one():
    net = Counting()
    dpcourse.DataParallel(net, devices=dpcourse.devices(2))(torch.randn(4, 3))
    assert net.counter == 0 and sorted(net.log) == [2, 2]
    dpcourse.DataParallel(net, devices=dpcourse.devices(1))(torch.randn(4, 3))
    assert net.counter == 1


def test_gradients_of_all_replicas_are_summed_into_the_original():
    net = nn.Linear(2, 1, bias=False)
    replicas = dpcourse.replicate(net, dpcourse.devices(3))
    sum(r.weight.sum() * (i + 1) for i, r in enumerate(replicas)).backward()
    assert torch.equal(net.weight.grad, torch.full((1, 2), 6.0))


def test_shared_submodules_and_tied_weights_stay_shared_in_each_replica():
    shared = nn.Linear(2, 2)
    net = nn.Sequential(shared, nn.ReLU(), shared)
    tied = nn.Module()
    tied.a, tied.b = nn.Linear(2, 2), nn.Linear(2, 2)
    tied.b.weight = tied.a.weight
    for replica in dpcourse.replicate(net, dpcourse.devices(2)):
        assert replica[0] is replica[2]
    for replica in dpcourse.replicate(tied, dpcourse.devices(2)):
        assert replica.a.weight is replica.b.weight


def test_frozen_parameters_get_frozen_copies():
    net = nn.Linear(2, 2)
    net.bias.requires_grad_(False)
    replicas = dpcourse.replicate(net, dpcourse.devices(2))
    assert all(not r.bias.requires_grad and r.weight.requires_grad for r in replicas)


def test_rnn_replicas_keep_their_own_flat_weights():
    lstm = nn.LSTM(3, 4, batch_first=True)
    original = list(lstm._flat_weights)
    replicas = dpcourse.replicate(lstm, dpcourse.devices(2))
    assert all(a is b for a, b in zip(lstm._flat_weights, original, strict=True))
    out, _ = replicas[1](torch.randn(2, 5, 3))
    assert out.shape == (2, 5, 4)


def test_empty_device_list_gives_no_replicas_as_in_torch():
    assert dpcourse.replicate(nn.Linear(1, 1), []) == []


def test_buckets_group_by_dtype_and_close_once_they_reach_the_size_limit():
    big = torch.zeros(BROADCAST_BUCKET_BYTES // 4)
    tensors = [torch.zeros(2), torch.zeros(2, dtype=torch.int64), torch.zeros(3), big, torch.zeros(1)]
    assert buckets(tensors) == [[0, 2, 3], [1], [4]]  # the big tensor joins the open float32 bucket and closes it


@pytest.mark.parametrize(
    "module, error, message",
    [
        ("not a module", TypeError, "needs an nn.Module, got str"),
        (nn.LazyLinear(3), RuntimeError, "uninitialized parameters"),
    ],
)
def test_bad_modules_are_named(module, error, message):
    with pytest.raises(error, match=message):
        dpcourse.replicate(module, dpcourse.devices(2))


def test_parameters_not_on_devices0_are_refused():
    # A "meta" module stands in for one left on another GPU: CPU devices cannot show a real mismatch.
    net = nn.Linear(2, 2, device="meta")
    with pytest.raises(RuntimeError, match=r"must be on devices\[0\] = cpu, but one is on meta"):
        dpcourse.replicate(net, dpcourse.devices(2))


def test_tensor_at_reads_parameter_copies_on_replicas():
    net = Counting()
    replica = dpcourse.replicate(net, dpcourse.devices(2))[1]
    assert tensor_at(net, "fc.weight") is net.fc.weight
    assert tensor_at(replica, "fc.weight") is replica.fc.weight and tensor_at(replica, "bn.running_mean") is not None


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated")  # torch._dynamo's own imports
@pytest.mark.parametrize("where", ["top", "child"])
def test_a_compiled_module_is_refused_before_anything_is_touched(where):
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    before = {name: p for name, p in model.named_parameters()}
    wrapped = torch.compile(model) if where == "top" else nn.Sequential(torch.compile(model))
    expected = "the module" if where == "top" else "submodule '0'"
    with pytest.raises(RuntimeError, match=f"cannot copy {expected}: it is a torch.compile'd module"):
        dpcourse.DataParallel(wrapped, devices=dpcourse.devices(2))(torch.randn(4, 2))
    assert {name: p for name, p in model.named_parameters()} == before


def test_module_registration_hooks_see_every_childs_replica_as_under_setattr():
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    seen = []
    handle = nn.modules.module.register_module_module_registration_hook(lambda module, name, child: seen.append(name))
    try:
        dpcourse.replicate(model, dpcourse.devices(2))
    finally:
        handle.remove()
    assert seen == ["0", "1", "0", "1"]  # two children, two replicas
