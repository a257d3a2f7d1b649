"""Oracle tests: dpcourse.DataParallel on N CPU "devices" against one model on the whole batch.

The oracle is plain PyTorch on one device. DataParallel splits the batch with ``torch.chunk``, runs each
chunk on a replica, concatenates the outputs and **sums** the replicas' gradients into the original
(torch_dp_behaviour.md §6). With the loss computed on the gathered output, that is exactly single-device
training, for any chunk sizes, as long as no operation mixes samples. Where one does (BatchNorm in train
mode, a loss reduced inside forward), the oracle is the same model applied chunk by chunk.

The devices are spelled out as CPU devices rather than taken from ``dpcourse.devices(n)``: on a machine with
a GPU that returns CUDA devices, and these tests are about the arithmetic, not the hardware
(tests/test_cuda.py covers GPUs). Chunked matmuls may differ from a full-batch matmul in the last bits,
hence the slightly loosened float32 tolerance.
"""

import copy
import functools
from collections import namedtuple
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import dpcourse

TOL = {"rtol": 1e-5, "atol": 1e-5}
FEATURES = 5
STEPS = 4  # sequence length for the LSTM and the time-major model
CPU = torch.device("cpu")

# n replicas x batch size: even and uneven splits (10 on 4 -> 3,3,3,1), fewer chunks than devices
# (6 on 4 -> 2,2,2: only 3 replicas run) and a batch smaller than n (3 on 8).
SPLITS = [pytest.param(n, batch, id=f"n{n}-b{batch}") for n in range(1, 9) for batch in (8, 10, 7, 6, 3)]


def cpu_devices(n: int) -> list[torch.device]:
    """n CPU "devices": what dpcourse.devices(n) returns on a machine without CUDA."""
    return [CPU] * n


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------------------------------------- models


class ScaleShift(nn.Module):
    """A layer with its own parameters, used directly in forward (not through a torch layer)."""

    def __init__(self, features: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(features))
        self.shift = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * self.scale + self.shift


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, kernel_size=3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        h = F.relu(self.bn(self.conv(x)))
        return self.head(h.mean(dim=(2, 3)))


class LastStepLSTM(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(FEATURES, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        # The classic DataParallel + RNN idiom; on a replica it must see the replica's weights.
        self.lstm.flatten_parameters()
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


Outputs = namedtuple("Outputs", ["logits", "features"])


class TwoHeads(nn.Module):
    """Returns a dict or a namedtuple of two tensors."""

    def __init__(self, as_namedtuple: bool):
        super().__init__()
        self.as_namedtuple = as_namedtuple
        self.trunk = nn.Linear(FEATURES, 6)
        self.head = nn.Linear(6, 3)

    def forward(self, x):
        features = torch.tanh(self.trunk(x))
        logits = self.head(features)
        if self.as_namedtuple:
            return Outputs(logits, features)
        return {"logits": logits, "features": features}


class Masked(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEATURES, 3)

    def forward(self, x, mask=None):
        h = self.fc(x)
        return h if mask is None else h * mask


class TimeMajor(nn.Module):
    """Takes (T, B, F) and returns (T, B, 3): the batch is dim 1 on the way in and out."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEATURES, 3)

    def forward(self, x):
        h = self.fc(x.transpose(0, 1))  # (B, T, 3)
        return h.cumsum(dim=1).transpose(0, 1)


class MeanLossInForward(nn.Module):
    """The model returns its own loss, a 0-d mean over its chunk: the documented DataParallel pitfall."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(FEATURES, 3)

    def forward(self, x, target):
        return F.mse_loss(self.fc(x), target)


class BagOfEmbeddings(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(20, 4, sparse=True)

    def forward(self, ids):
        return self.embedding(ids).sum(dim=1)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 8), nn.Tanh(), nn.Linear(8, 3))


def scale_shift_net() -> nn.Module:
    return nn.Sequential(ScaleShift(FEATURES), nn.Linear(FEATURES, 3), ScaleShift(3))


def conv_bn_eval() -> nn.Module:
    model = ConvBN()
    model.bn.running_mean.uniform_(-1, 1)
    model.bn.running_var.uniform_(0.5, 2)
    return model.eval()


# ------------------------------------------------------------------------------------------- helpers


def rows(*shape: int) -> Callable[[int], tuple[tuple, dict]]:
    """Inputs maker: one random tensor of ``batch`` rows of ``shape``, no kwargs."""
    return lambda batch: ((torch.randn(batch, *shape),), {})


def masked_inputs(batch: int) -> tuple[tuple, dict]:
    return (torch.randn(batch, FEATURES),), {"mask": torch.rand(batch, 3)}


def time_major_inputs(batch: int) -> tuple[tuple, dict]:
    return (torch.randn(STEPS, batch, FEATURES),), {}


@dataclass(frozen=True)
class Case:
    model: Callable[[], nn.Module]
    inputs: Callable[[int], tuple[tuple, dict]]
    dim: int = 0


CASES = {
    "mlp": Case(mlp, rows(FEATURES)),
    "own-parameters": Case(scale_shift_net, rows(FEATURES)),
    "conv-bn-eval": Case(conv_bn_eval, rows(2, 6, 6)),
    "lstm": Case(LastStepLSTM, rows(STEPS, FEATURES)),
    "dict-output": Case(functools.partial(TwoHeads, as_namedtuple=False), rows(FEATURES)),
    "namedtuple-output": Case(functools.partial(TwoHeads, as_namedtuple=True), rows(FEATURES)),
    "tensor-kwarg": Case(Masked, masked_inputs),
    "dim1-time-major": Case(TimeMajor, time_major_inputs, dim=1),
}


def leaves(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    items = out.values() if isinstance(out, dict) else out
    return [t for item in items for t in leaves(item)]


def loss_of(out) -> torch.Tensor:
    """A non-linear loss of every output tensor, so each gathered row gets its own upstream gradient."""
    return sum(t.square().mean() + t.sin().sum() for t in leaves(out))


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    found = {name: p.grad for name, p in model.named_parameters()}
    missing = [name for name, grad in found.items() if grad is None]
    assert not missing, f"no gradient reached {missing}"
    return found


def dp_forward_backward(model: nn.Module, args: tuple, kwargs: dict, n: int, dim: int = 0):
    out = dpcourse.DataParallel(model, devices=cpu_devices(n), dim=dim)(*args, **kwargs)
    loss_of(out).backward()
    return out


def assert_same_training(model: nn.Module, reference: nn.Module, out, expected) -> None:
    assert type(out) is type(expected)
    if isinstance(expected, dict):
        assert list(out) == list(expected)
    assert all(t.device == CPU for t in leaves(out)), "outputs must be gathered on output_device"
    assert_close(out, expected, **TOL)
    assert_close(grads(model), grads(reference), **TOL)


# --------------------------------------------------------------------------- equal to single device


@pytest.mark.parametrize(("n", "batch"), SPLITS)
@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_outputs_and_grads_equal_single_device(case: Case, n: int, batch: int):
    model = case.model()
    reference = copy.deepcopy(model)
    args, kwargs = case.inputs(batch)

    expected = reference(*args, **kwargs)
    loss_of(expected).backward()
    out = dp_forward_backward(model, args, kwargs, n, case.dim)

    assert_same_training(model, reference, out, expected)


@pytest.mark.parametrize(("n", "batch"), SPLITS)
def test_batchnorm_train_mode_is_per_chunk(n: int, batch: int):
    """Batch statistics come from each chunk, and the running stats from chunk 0 only (replica 0 aliasing)."""
    model = ConvBN()
    reference, chunk0_only = copy.deepcopy(model), copy.deepcopy(model)
    x = torch.randn(batch, 2, 6, 6)

    expected = torch.cat([reference(chunk) for chunk in x.chunk(n)])
    loss_of(expected).backward()  # the loss of the concatenation: the sum of the per-chunk gradients
    chunk0_only(x.chunk(n)[0])
    out = dp_forward_backward(model, (x,), {}, n)

    assert_same_training(model, reference, out, expected)
    assert_close(dict(model.bn.named_buffers()), dict(chunk0_only.bn.named_buffers()), **TOL)
    assert model.bn.num_batches_tracked.item() == 1


# ------------------------------------------------------------------------------------------ training


def train(forward: Callable, model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
    for x, target in batches:
        optimizer.zero_grad()
        F.mse_loss(forward(x), target).backward()
        optimizer.step()


def as_module(model: nn.Module, devices: list[torch.device]) -> Callable:
    return dpcourse.DataParallel(model, devices=devices)


def as_function(model: nn.Module, devices: list[torch.device]) -> Callable:
    return functools.partial(dpcourse.data_parallel, model, devices=devices)


@pytest.mark.parametrize(
    ("wrap", "steps"), [(as_module, 20), (as_function, 5)], ids=["DataParallel", "data_parallel"]
)
@pytest.mark.parametrize("case", [CASES["mlp"], CASES["lstm"]], ids=["mlp", "lstm"])
def test_sgd_momentum_training_matches_single_device(case: Case, wrap: Callable, steps: int):
    """10 rows on 3 devices (chunks 4, 4, 2), fresh batch each step: the weights must never drift apart.

    Afterwards the original module, called directly, must still compute with its own (trained) weights:
    an RNN replica that wrote its copies into the original's ``_flat_weights`` list would break that.
    """
    model = case.model()
    reference = copy.deepcopy(model)
    batches = [(case.inputs(10)[0][0], torch.randn(10, 3)) for _ in range(steps)]

    train(wrap(model, cpu_devices(3)), model, batches)
    train(reference, reference, batches)

    assert_close(dict(model.named_parameters()), dict(reference.named_parameters()), rtol=1e-5, atol=1e-6)
    (x,), _ = case.inputs(10)
    assert_close(model(x), reference(x), **TOL)


# ------------------------------------------------------------------------------- autograd corners


def penalised_backward(forward: Callable, x: torch.Tensor) -> torch.Tensor:
    """Loss with a gradient penalty on the input (WGAN-GP style): backward goes through a backward."""
    x = x.clone().requires_grad_()
    out = forward(x)
    (grad_x,) = torch.autograd.grad(out.sum(), x, create_graph=True)
    loss = out.square().mean() + (grad_x.norm(dim=1) - 1).square().mean()
    loss.backward()
    return grad_x


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_double_backward_gradient_penalty(n: int):
    model = mlp()
    reference = copy.deepcopy(model)
    x = torch.randn(7, FEATURES)

    expected_grad_x = penalised_backward(reference, x)
    grad_x = penalised_backward(dpcourse.DataParallel(model, devices=cpu_devices(n)), x)

    assert_close(grad_x, expected_grad_x, **TOL)
    assert_close(grads(model), grads(reference), **TOL)


@pytest.mark.parametrize(("n", "batch"), [(2, 7), (3, 10), (3, 2)])
def test_sparse_embedding_grad_is_summed_and_stays_sparse(n: int, batch: int):
    model = BagOfEmbeddings()
    reference = copy.deepcopy(model)
    ids = torch.randint(0, 20, (batch, 6))

    reference(ids).square().sum().backward()
    model_out = dpcourse.DataParallel(model, devices=cpu_devices(n))(ids)
    model_out.square().sum().backward()

    grad = model.embedding.weight.grad
    assert grad.is_sparse
    assert_close(grad.to_dense(), reference.embedding.weight.grad.to_dense(), **TOL)


# ------------------------------------------------------------------------------------------ pitfall


@pytest.mark.parametrize(("batch", "equal_chunks"), [(8, True), (7, False)], ids=["chunks-4-4", "chunks-4-3"])
def test_mean_loss_inside_forward_is_biased_for_uneven_chunks(batch: int, equal_chunks: bool):
    """Each replica returns its chunk's mean; the mean of those weighs a sample by 1/(N * chunk size).

    That equals the full-batch mean (weight 1/B) only when the chunks are equal (§6, "does not equal").
    """
    model = MeanLossInForward()
    single, chunked = copy.deepcopy(model), copy.deepcopy(model)
    x, target = torch.randn(batch, FEATURES), torch.randn(batch, 3)

    single(x, target).backward()
    torch.stack([chunked(*pair) for pair in zip(x.chunk(2), target.chunk(2), strict=True)]).mean().backward()
    with pytest.warns(UserWarning, match="scalars"):
        losses = dpcourse.DataParallel(model, devices=cpu_devices(2))(x, target)
    assert losses.shape == (2,)
    assert losses.device == CPU
    losses.mean().backward()

    assert_close(grads(model), grads(chunked), **TOL)
    if equal_chunks:
        assert_close(grads(model), grads(single), **TOL)
    else:
        with pytest.raises(AssertionError):
            assert_close(grads(model), grads(single), **TOL)
