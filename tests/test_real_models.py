"""Real third-party models through dpcourse.DataParallel on CPU devices, checked against oracles.

The models come from ``transformers`` and are built from small configs with random weights: nothing is
downloaded. The oracles are the same model on one device, the same model run chunk by chunk, and torch's
own DataParallel code run on CPU devices (``tests/benchmarks/torch_on_cpu.py``) where the question is "what
would torch return". Also here: the two promises torch's own DataParallel tests check on every forward
(no reference cycles, no thread left behind).

torchvision's resnet18 is not used: PyPI's torchvision wheel is built against CUDA torch, so with the CPU
torch its C++ operators fail to register and ``import torchvision`` raises (which also breaks
``import transformers``, as transformers imports torchvision whenever it is installed). transformers'
own ResNet with resnet18's layout (basic blocks, depths 2-2-2-2, widths 64-512) stands in for it.
"""

import copy
import gc
import os
import threading

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: a config-built model must not reach the hub

import pytest
import torch
import transformers
from torch import nn
from transformers.cache_utils import Cache, DynamicCache

import dpcourse
from tests.benchmarks.torch_on_cpu import torch_on_cpu

# torch's reduce_add (run by the torch oracle) asks nccl.is_available(), which warns on a build without NCCL.
pytestmark = pytest.mark.filterwarnings("ignore:PyTorch is not compiled with NCCL support")

TIGHT = {"rtol": 1e-5, "atol": 1e-6}
SCALARS_WARNING = "all input tensors were scalars"


def seeded(build, *args, **kwargs):
    torch.manual_seed(0)
    return build(*args, **kwargs)


def tiny_bert() -> transformers.BertForSequenceClassification:
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37,
        max_position_embeddings=64, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
    )  # fmt: skip
    return seeded(transformers.BertForSequenceClassification, config).eval()


def tiny_gpt2() -> transformers.GPT2LMHeadModel:
    config = transformers.GPT2Config(
        vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=99, eos_token_id=99,
    )  # fmt: skip
    return seeded(transformers.GPT2LMHeadModel, config).eval()


def resnet18_layout() -> transformers.ResNetForImageClassification:
    config = transformers.ResNetConfig(
        num_labels=10, layer_type="basic", embedding_size=64, depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512]
    )
    return seeded(transformers.ResNetForImageClassification, config).train()


def text_batch(rows: int = 6, length: int = 10) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    attention_mask = torch.ones(rows, length, dtype=torch.long)
    attention_mask[::2, 7:] = 0  # every other sequence is padded
    return {
        "input_ids": torch.randint(0, 100, (rows, length), generator=generator),
        "attention_mask": attention_mask,
        "labels": torch.randint(0, 3, (rows,), generator=generator),
    }


def chunked(kwargs: dict[str, torch.Tensor], n: int) -> list[dict[str, torch.Tensor]]:
    """The keyword inputs each replica gets: every tensor split with torch.chunk's rule."""
    pieces = {key: value.chunk(n) for key, value in kwargs.items()}
    return [dict(zip(pieces, values, strict=True)) for values in zip(*pieces.values(), strict=True)]


def grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("n", [2, 3])
def test_bert_keyword_inputs_give_logits_and_one_loss_per_replica(n: int) -> None:
    model, single = tiny_bert(), tiny_bert()
    kwargs = text_batch()
    wrapped = dpcourse.DataParallel(model, devices=dpcourse.devices(n))
    with pytest.warns(UserWarning, match=SCALARS_WARNING):
        output = wrapped(**kwargs)
    assert type(output) is transformers.modeling_outputs.SequenceClassifierOutput
    assert list(output.keys()) == ["loss", "logits"]
    torch.testing.assert_close(output.logits, single(**kwargs).logits, **TIGHT)

    chunk_losses = [single(**chunk).loss for chunk in chunked(kwargs, n)]
    assert output.loss.shape == (n,)
    torch.testing.assert_close(output.loss, torch.stack(chunk_losses).detach(), **TIGHT)
    output.loss.mean().backward()
    torch.stack(chunk_losses).mean().backward()
    expected = grads(single)
    assert grads(model).keys() == expected.keys()
    for name, grad in grads(model).items():
        torch.testing.assert_close(grad, expected[name], **TIGHT, msg=lambda m, name=name: f"{name}: {m}")


def test_gpt2_cache_is_gathered_as_torch_gathers_it() -> None:
    """torch rebuilds any other object as ``type(out)(map(gather_map, zip(*outputs)))``.

    A DynamicCache iterates as one ``(keys, values, sliding_window)`` tuple per layer, and its constructor
    takes exactly such an iterable (its ``ddp_cache_data`` argument exists for this): so torch's gather
    returns a DynamicCache whose keys and values are concatenated along the batch.
    """
    model, torch_model, single = tiny_gpt2(), tiny_gpt2(), tiny_gpt2()
    input_ids = text_batch()["input_ids"]
    output = dpcourse.DataParallel(model, devices=dpcourse.devices(2))(input_ids=input_ids, use_cache=True)
    with torch_on_cpu():
        expected = nn.DataParallel(torch_model, device_ids=[0, 1])(input_ids=input_ids, use_cache=True)
    reference = single(input_ids=input_ids, use_cache=True)

    assert type(output) is type(expected) is transformers.modeling_outputs.CausalLMOutputWithCrossAttentions
    assert list(output.keys()) == list(expected.keys())
    torch.testing.assert_close(output.logits, reference.logits, **TIGHT)
    torch.testing.assert_close(output.logits, expected.logits, **TIGHT)

    cache, torch_cache, single_cache = (next(v for v in o.values() if isinstance(v, Cache)) for o in
                                        (output, expected, reference))  # fmt: skip
    assert type(cache) is type(torch_cache) is DynamicCache
    assert [type(layer) for layer in cache.layers] == [type(layer) for layer in torch_cache.layers]
    assert cache.get_seq_length() == torch_cache.get_seq_length() == input_ids.shape[1]
    for ours, torchs, one in zip(cache, torch_cache, single_cache, strict=True):
        assert len(ours) == len(torchs) == 3 and ours[2] is None and torchs[2] is None
        for ours_t, torchs_t, one_t in zip(ours[:2], torchs[:2], one[:2], strict=True):
            assert ours_t.shape == torchs_t.shape == (input_ids.shape[0], 2, input_ids.shape[1], 16)
            torch.testing.assert_close(ours_t, torchs_t, **TIGHT)
            torch.testing.assert_close(ours_t, one_t, **TIGHT)


def test_resnet_batchnorm_training_matches_a_copy_per_chunk() -> None:
    # float64: in float32, 20 layers of BatchNorm over 4 images turn rounding (replicas run with fewer
    # intra-op threads, so sums are ordered differently) into gradient differences of 2e-5 of the largest
    # gradient; in float64 they are 3e-14, so the tolerances can stay torch's tight float64 defaults.
    model = resnet18_layout().double()
    copies = [copy.deepcopy(model) for _ in range(2)]
    generator = torch.Generator().manual_seed(2)
    images = torch.randn(8, 3, 32, 32, generator=generator, dtype=torch.float64)
    labels = torch.randint(0, 10, (8,), generator=generator)

    logits = dpcourse.DataParallel(model, devices=dpcourse.devices(2))(images).logits
    nn.functional.cross_entropy(logits, labels).backward()
    chunk_logits = torch.cat([replica(chunk).logits for replica, chunk in zip(copies, images.chunk(2), strict=True)])
    nn.functional.cross_entropy(chunk_logits, labels).backward()

    torch.testing.assert_close(logits, chunk_logits)
    for name, grad in grads(model).items():
        summed = sum(grads(replica)[name] for replica in copies)
        torch.testing.assert_close(grad, summed, msg=lambda m, name=name: f"{name}: {m}")
    # Replica 0 shares the module's buffers, so BatchNorm's running statistics are chunk 0's; the other
    # replicas update copies that are thrown away.
    buffers = list(model.named_buffers())
    for (name, buffer), first_chunk in zip(buffers, copies[0].buffers(), strict=True):
        torch.testing.assert_close(buffer, first_chunk, msg=lambda m, name=name: f"{name}: {m}")
    assert not any(
        torch.allclose(b, second)
        for (_, b), second in zip(buffers, copies[1].buffers(), strict=True)
        if b.is_floating_point()
    )


class Model(nn.Module):
    """torch's own no-refcycles test uses this module (test_data_parallel_model_no_refcycles)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


@pytest.mark.parametrize("rows", [1, 8], ids=["one-replica", "two-replicas"])
def test_a_forward_leaves_no_reference_cycles(rows: int) -> None:
    gc.collect()
    model = dpcourse.DataParallel(Model(), devices=dpcourse.devices(2))
    model(torch.randn(rows, 1))
    assert gc.collect() == 0


def test_64_devices_forward_and_backward_leave_no_thread_behind() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    before = threading.active_count()
    dpcourse.DataParallel(model, devices=dpcourse.devices(64))(torch.randn(64, 4)).sum().backward()
    assert threading.active_count() == before
