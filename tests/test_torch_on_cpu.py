"""tests/benchmarks/torch_on_cpu.py: torch's own DataParallel code, run on CPU devices, trains like one device.

The benchmark compares dpcourse with this emulation, so the emulation itself must be right: same outputs
and gradients as the plain module on the whole batch, torch's replica-0 aliasing, and nothing left patched.
"""

import pytest
import torch
from torch import nn

import dpcourse
from tests.benchmarks.torch_on_cpu import torch_on_cpu

# torch's reduce_add asks nccl.is_available(), which warns on a build without NCCL: torch's own path, not ours.
pytestmark = pytest.mark.filterwarnings("ignore:PyTorch is not compiled with NCCL support")

TIGHT = {"rtol": 1e-5, "atol": 1e-6}


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 5))


def batch(rows: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(rows, 12, generator=generator), torch.randint(0, 5, (rows,), generator=generator)


def sgd_step(model: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float = 0.1) -> torch.Tensor:
    output = model(x)
    nn.functional.cross_entropy(output, y).backward()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter -= lr * parameter.grad
            parameter.grad = None
    return output.detach()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_forward_and_backward_equal_one_device(n: int) -> None:
    single, model = mlp(), mlp()
    x, y = batch()
    nn.functional.cross_entropy(single(x), y).backward()
    with torch_on_cpu():
        wrapped = nn.DataParallel(model, device_ids=list(range(n)))
        output = wrapped(x)
        nn.functional.cross_entropy(output, y).backward()
    assert isinstance(output.grad_fn, torch.nn.parallel._functions.Gather._backward_cls)
    torch.testing.assert_close(output, single(x), **TIGHT)
    for ours, theirs in zip(model.parameters(), single.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad, **TIGHT)


def test_five_training_steps_follow_one_device() -> None:
    single, model = mlp(), mlp()
    x, y = batch(16)
    with torch_on_cpu():
        wrapped = nn.DataParallel(model, device_ids=[0, 1])
        for _ in range(5):
            torch.testing.assert_close(sgd_step(wrapped, x, y), sgd_step(single, x, y), **TIGHT)
    for ours, theirs in zip(model.parameters(), single.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, **TIGHT)


def test_functional_data_parallel_with_kwargs() -> None:
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.body = mlp()

        def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return self.body(x) * scale

    model = Scaled()
    x, _ = batch(8)
    scale = torch.arange(8.0).unsqueeze(1)
    with torch_on_cpu():
        output = nn.parallel.data_parallel(model, (x,), device_ids=[0, 1], module_kwargs={"scale": scale})
    torch.testing.assert_close(output, model(x, scale), **TIGHT)


def test_replica_zero_aliases_the_module_and_the_others_copy() -> None:
    model = mlp()
    with torch_on_cpu(), torch.no_grad():
        replicas = nn.parallel.replicate(model, [0, 1, 2], detach=True)
    first, second = (replica[0].weight for replica in replicas[:2])
    assert first is model[0].weight
    assert second.data_ptr() != model[0].weight.data_ptr()
    torch.testing.assert_close(second, model[0].weight, rtol=0, atol=0)


def test_batchnorm_running_stats_come_from_chunk_zero() -> None:
    torch.manual_seed(0)
    model, chunk_model = nn.BatchNorm1d(6), nn.BatchNorm1d(6)
    x = torch.randn(8, 6)
    chunk_model(x[:4])
    with torch_on_cpu():
        nn.DataParallel(model, device_ids=[0, 1])(x)
    torch.testing.assert_close(model.running_mean, chunk_model.running_mean, rtol=0, atol=0)
    torch.testing.assert_close(model.running_var, chunk_model.running_var, rtol=0, atol=0)


def test_dpcourse_equals_torchs_own_code() -> None:
    torch_model, our_model = mlp(), mlp()
    x, y = batch(12)
    with torch_on_cpu():
        torch_output = nn.DataParallel(torch_model, device_ids=[0, 1, 2])(x)
        nn.functional.cross_entropy(torch_output, y).backward()
    our_output = dpcourse.DataParallel(our_model, devices=dpcourse.devices(3))(x)
    nn.functional.cross_entropy(our_output, y).backward()
    torch.testing.assert_close(our_output, torch_output, **TIGHT)
    for ours, theirs in zip(our_model.parameters(), torch_model.parameters(), strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad, **TIGHT)


def test_nothing_stays_patched() -> None:
    parallel = torch.nn.parallel
    before = (vars(torch._C).get("_scatter"), parallel._functions.Broadcast.forward, parallel.comm.reduce_add)
    with torch_on_cpu():
        pass
    after = (vars(torch._C).get("_scatter"), parallel._functions.Broadcast.forward, parallel.comm.reduce_add)
    assert after == before
    assert parallel.comm.torch is torch
    with pytest.raises(AssertionError, match="not implemented for CPU tensors"):
        parallel._functions.Broadcast.apply([0, 1], mlp()[0].weight)
