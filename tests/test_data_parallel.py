"""DataParallel and data_parallel: the forward's order of steps, shortcuts, checks and state_dict."""

import pathlib
import re

import pytest
import torch
from torch import nn

import dpcourse


class Needs(nn.Module):
    """forward(x, y): a batch that chunks unluckily leaves the last replicas without y."""

    def forward(self, x, y):
        return x + y.sum()


def test_without_gpus_default_devices_mean_pass_through():
    if torch.cuda.is_available():
        pytest.skip("pass-through happens only without GPUs")
    net = nn.Linear(2, 2)
    dp = dpcourse.DataParallel(net)
    x = torch.randn(3, 2)
    assert dp.devices == [] and dp.module is net and torch.equal(dp(x), net(x))


def test_state_dict_keys_get_the_module_prefix():
    dp = dpcourse.DataParallel(nn.Linear(2, 2), devices=dpcourse.devices(2))
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]
    with pytest.raises(RuntimeError, match='Missing key\\(s\\) in state_dict: "module.weight"'):
        dp.load_state_dict(nn.Linear(2, 2).state_dict())
    nn.Linear(2, 2).load_state_dict(dp.module.state_dict())


def test_only_as_many_replicas_as_chunks_run():
    seen = []
    net = nn.Identity()
    net.register_forward_hook(lambda module, args, out: seen.append(args[0].shape[0]))
    dpcourse.DataParallel(net, devices=dpcourse.devices(4))(torch.zeros(6, 1))
    assert sorted(seen) == [2, 2, 2]


def test_unlucky_chunking_leaves_a_replica_without_an_argument():
    dp = dpcourse.DataParallel(Needs(), devices=dpcourse.devices(4))
    with pytest.raises(TypeError, match="Caught TypeError in replica 3 on device cpu"):
        dp(torch.zeros(8, 1), y=torch.zeros(3))


def test_single_device_shortcut_skips_gather_and_scalar_warning():
    class Loss(nn.Module):
        def forward(self, x):
            return x.sum()

    out = dpcourse.DataParallel(Loss(), devices=["cpu"])(torch.ones(4))
    assert out.dim() == 0
    with pytest.warns(UserWarning, match="scalars"):
        out = dpcourse.DataParallel(Loss(), devices=dpcourse.devices(2))(torch.ones(4))
    assert out.tolist() == [2.0, 2.0]


def test_no_arguments_run_once_on_devices0():
    class Constant(nn.Module):
        def forward(self):
            return torch.ones(1)

    assert dpcourse.DataParallel(Constant(), devices=dpcourse.devices(3))().shape == (1,)


def test_under_no_grad_replicas_are_detached_and_batchnorm_stats_come_from_chunk0():
    bn = nn.BatchNorm1d(2)
    x = torch.randn(8, 2)
    reference = nn.BatchNorm1d(2)
    reference(x[:4])
    with torch.no_grad():
        dpcourse.DataParallel(bn, devices=dpcourse.devices(2))(x)
    torch.testing.assert_close(bn.running_mean, reference.running_mean)
    assert bn.num_batches_tracked.item() == 1


def test_placement_is_checked_on_every_forward():
    dp = dpcourse.DataParallel(nn.Linear(2, 2), devices=dpcourse.devices(2))
    dp.module.to("meta")
    with pytest.raises(RuntimeError, match=r"on device cpu \(devices\[0\]\) but found one of them on device: meta"):
        dp(torch.zeros(2, 2))


def test_output_device_and_dim_are_kept():
    dp = dpcourse.DataParallel(nn.Identity(), devices=dpcourse.devices(2), output_device="cpu", dim=1)
    assert dp.output_device == torch.device("cpu") and dp(torch.zeros(2, 6)).shape == (2, 6)


def test_data_parallel_functional_form():
    net = nn.Linear(3, 2)
    x = torch.randn(5, 3)
    torch.testing.assert_close(dpcourse.data_parallel(net, x, devices=dpcourse.devices(2)), net(x))
    out = dpcourse.data_parallel(Needs(), (torch.zeros(4, 1),), dpcourse.devices(2), module_kwargs={"y": torch.ones(4)})
    assert out.tolist() == [[2.0]] * 4


def test_data_parallel_without_gpus_needs_devices():
    if torch.cuda.is_available():
        pytest.skip("checks the no-GPU error")
    with pytest.raises(RuntimeError, match="dpcourse.devices"):
        dpcourse.data_parallel(nn.Linear(1, 1), torch.zeros(2, 1))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: dpcourse.DataParallel(nn.Linear(1, 1), devices=[]), ValueError, "empty device list"),
        (lambda: dpcourse.DataParallel("net", devices=["cpu"]), TypeError, "wraps an nn.Module, got str"),
        (lambda: dpcourse.data_parallel(nn.Linear(1, 1), torch.zeros(1, 1), []), ValueError, "empty device list"),
    ],
)
def test_bad_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message):
        call()


# The uses allowed build torch's real DistributedDataParallel (not a DP primitive): lesson 10's bridge, and
# lesson 17's DDP script, which imports it as every DDP script does.
DDP_IMPORTS = [
    ("ddp/per_rank.py", "from torch.nn.parallel import DistributedDataParallel"),
    ("scripts/train_ddp.py", "from torch.nn.parallel import DistributedDataParallel"),
]


def test_the_package_never_uses_torch_nn_parallel():
    package = pathlib.Path(dpcourse.__file__).parent
    uses = [
        (path.relative_to(package).as_posix(), line.strip())
        for path in package.rglob("*.py")
        for line in path.read_text().splitlines()
        if re.search(r"torch\.nn\.parallel|nn\.parallel\.|from torch\.nn import .*\bparallel\b", line)
    ]
    assert sorted(uses) == DDP_IMPORTS
