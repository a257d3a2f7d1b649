"""scatter / scatter_kwargs / gather: the torch.chunk rule, structure handling, autograd and error messages."""

import collections
import dataclasses
import gc
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import dpcourse
from dpcourse._functions import SCALAR_GATHER_WARNING

Pair = collections.namedtuple("Pair", "a b")


def sizes(chunks, dim=0):
    return [c.shape[dim] for c in chunks]


@pytest.mark.parametrize(
    "batch, n, expected",
    [
        (10, 4, [3, 3, 3, 1]),
        (9, 4, [3, 3, 3]),
        (6, 4, [2, 2, 2]),
        (5, 4, [2, 2, 1]),
        (10, 3, [4, 4, 2]),
        (7, 2, [4, 3]),
        (3, 4, [1, 1, 1]),
        (1, 4, [1]),
        (0, 3, [0, 0, 0]),
    ],
)
def test_chunk_sizes_follow_torch_chunk(batch, n, expected):
    assert sizes(dpcourse.scatter(torch.zeros(batch, 2), dpcourse.devices(n))) == expected


@settings(max_examples=200, deadline=None)
@given(batch=st.integers(0, 64), n=st.integers(1, 9), dim=st.sampled_from([0, 1, -1]))
def test_chunk_rule_and_round_trip(batch, n, dim):
    shape = [3, 3]
    shape[dim] = batch
    x = torch.arange(math.prod(shape), dtype=torch.float32).reshape(shape)
    chunks = dpcourse.scatter(x, dpcourse.devices(n), dim=dim)
    got = sizes(chunks, dim)
    if batch > 0:
        size = math.ceil(batch / n)
        assert got == [min(size, batch - i * size) for i in range(math.ceil(batch / size))]
    assert len(got) <= n and sum(got) == batch
    assert torch.equal(dpcourse.gather(list(chunks), "cpu", dim=dim), x)


@settings(max_examples=50, deadline=None)
@given(batches=st.lists(st.integers(1, 20), min_size=1, max_size=4), n=st.integers(1, 6))
def test_number_of_entries_is_the_smallest_over_the_leaves(batches, n):
    inputs = tuple(torch.zeros(b) for b in batches)
    entries = dpcourse.scatter(inputs, dpcourse.devices(n))
    assert len(entries) == min(len(torch.zeros(b).chunk(n)) for b in batches)


def test_top_level_tensor_gives_a_tuple_containers_give_lists():
    x = torch.zeros(4, 2)
    devices = dpcourse.devices(2)
    assert isinstance(dpcourse.scatter(x, devices), tuple)
    assert isinstance(dpcourse.scatter((x,), devices), list)
    assert dpcourse.scatter((x, 5), devices)[1][1] == 5
    as_list = dpcourse.scatter([x, x], devices)
    assert isinstance(as_list[0], list) and len(as_list[0]) == 2


def test_namedtuple_and_dict_keep_their_type():
    x = torch.zeros(4, 2)
    devices = dpcourse.devices(2)
    per_device = dpcourse.scatter(Pair(x, "tag"), devices)
    assert all(type(p) is Pair and p.b == "tag" and p.a.shape == (2, 2) for p in per_device)
    ordered = collections.OrderedDict(x=x, k=3)
    per_device = dpcourse.scatter(ordered, devices)
    assert all(type(d) is collections.OrderedDict and d["k"] == 3 for d in per_device)


def test_non_tensors_and_empty_containers_are_passed_by_reference():
    @dataclasses.dataclass
    class Box:
        t: torch.Tensor

    box, empty = Box(torch.zeros(4)), []
    per_device = dpcourse.scatter((box, empty, None, "s"), dpcourse.devices(3))
    assert len(per_device) == 3
    assert all(entry[0] is box and entry[1] is empty for entry in per_device)
    assert per_device[0][0].t.shape == (4,)  # a tensor inside a dataclass is not split


def test_chunks_on_the_same_device_are_views_and_backward_concatenates():
    x = torch.randn(6, 2, requires_grad=True)
    chunks = dpcourse.scatter(x, dpcourse.devices(3))
    assert chunks[0].data_ptr() == x.data_ptr()
    sum(c.sum() * (i + 1) for i, c in enumerate(chunks)).backward()
    assert torch.equal(x.grad[:, 0], torch.tensor([1.0, 1, 2, 2, 3, 3]))


@pytest.mark.parametrize(
    "inputs, kwargs, expected_inputs, expected_kwargs",
    [
        ((torch.zeros(2),), {"m": torch.zeros(8)}, [1, 1, 0, 0], [1, 1, 1, 1]),
        ((torch.zeros(8),), {"m": torch.zeros(2)}, [1, 1, 1, 1], [1, 1, 0, 0]),
        ((torch.zeros(8),), None, [1, 1, 1, 1], [0, 0, 0, 0]),
        ((), None, [], []),
    ],
)
def test_scatter_kwargs_pads_the_shorter_side(inputs, kwargs, expected_inputs, expected_kwargs):
    scattered_inputs, scattered_kwargs = dpcourse.scatter_kwargs(inputs, kwargs, dpcourse.devices(4))
    assert isinstance(scattered_inputs, tuple) and isinstance(scattered_kwargs, tuple)
    assert [len(a) for a in scattered_inputs] == expected_inputs
    assert [len(k) for k in scattered_kwargs] == expected_kwargs
    assert all(isinstance(a, tuple) for a in scattered_inputs)


def test_scatter_kwargs_with_non_tensors_only_gives_one_copy_per_device():
    inputs, kwargs = dpcourse.scatter_kwargs((1, 2), {"k": 3}, dpcourse.devices(3))
    assert inputs == ((1, 2),) * 3 and kwargs == ({"k": 3},) * 3


def test_gather_rebuilds_dicts_namedtuples_and_lists():
    a, b = torch.ones(3, 2), torch.zeros(2, 2)
    out = dpcourse.gather([{"y": a, "n": None}, {"y": b, "n": None}], "cpu")
    assert out["n"] is None and out["y"].shape == (5, 2)
    out = dpcourse.gather([Pair(a, [a]), Pair(b, [b])], "cpu")
    assert type(out) is Pair and out.a.shape == (5, 2) and out.b[0].shape == (5, 2)
    assert dpcourse.gather([None, 3], "cpu") is None
    assert dpcourse.gather([(), ()], "cpu") == ()


def test_gather_of_scalars_warns_and_returns_a_vector():
    parts = [torch.tensor(1.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)]
    with pytest.warns(UserWarning, match="all input tensors were scalars") as record:
        out = dpcourse.gather(parts, "cpu")
    assert str(record[0].message) == SCALAR_GATHER_WARNING
    assert out.shape == (2,)
    (out * torch.tensor([3.0, 4.0])).sum().backward()
    assert [p.grad.item() for p in parts] == [3.0, 4.0] and parts[0].grad.dim() == 0


def test_gather_casts_to_the_first_outputs_dtype():
    out = dpcourse.gather([torch.zeros(2, dtype=torch.float16), torch.ones(2, dtype=torch.float32)], "cpu")
    assert out.dtype == torch.float16


def test_no_warning_when_outputs_have_a_batch_dimension():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dpcourse.gather([torch.zeros(1), torch.zeros(1)], "cpu")


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: dpcourse.scatter(torch.tensor(1.0), dpcourse.devices(2)), RuntimeError, "0-d tensor"),
        (lambda: dpcourse.scatter(torch.zeros(4, 2), dpcourse.devices(2), dim=2), IndexError, "dim=2"),
        (lambda: dpcourse.scatter(torch.zeros(4), []), RuntimeError, "empty list"),
        (lambda: dpcourse.scatter(torch.zeros(4), ["gpu0"]), ValueError, "Unknown device 'gpu0'"),
        (lambda: dpcourse.scatter(torch.zeros(4), "cpu"), TypeError, "list of devices"),
        (lambda: dpcourse.gather([torch.zeros(2, 3), torch.zeros(2, 4)], "cpu"), RuntimeError, r"replica 1 .*\[2, 4\]"),
        (lambda: dpcourse.gather([torch.zeros(2, 3), torch.zeros(2)], "cpu"), RuntimeError, "same rank"),
        (lambda: dpcourse.gather([torch.zeros(2), torch.zeros(2)], "cpu", dim=1), IndexError, "dim=1"),
        (lambda: dpcourse.gather([torch.tensor(1.0)] * 2, "cpu", dim=1), IndexError, "scalar"),
        (lambda: dpcourse.gather([{"a": 1}, {"b": 1}], "cpu"), ValueError, r"keys \['a'\] .*replica 1"),
        (lambda: dpcourse.gather([{"a": 1}, {"a": 1, "b": 2}], "cpu"), ValueError, "same keys"),
        (lambda: dpcourse.gather([[torch.zeros(1)], []], "cpu"), ValueError, "1 item but replica 1 returned 0 items"),
        (lambda: dpcourse.gather([1, 2], "cpu"), TypeError, "type int"),
        (lambda: dpcourse.gather([torch.zeros(1), None], "cpu"), TypeError, "replica 1 returned NoneType"),
    ],
)
def test_bad_inputs_get_a_message_that_names_them(call, error, message):
    with pytest.raises(error, match=message):
        call()


class Cache:
    """An output object that is no tensor, dict or sequence, but iterates and is built from an iterable,
    like transformers' ``DynamicCache``: torch's gather rebuilds it as ``type(out)(map(gather_map, zip(*outputs)))``."""

    def __init__(self, items):
        self.items = list(items)

    def __iter__(self):
        return iter(self.items)


def test_gather_rebuilds_any_other_object_from_its_items_as_torch_does():
    pairs = [Cache([torch.zeros(2, 3), torch.ones(2)]), Cache([torch.ones(1, 3), torch.zeros(1)])]
    gathered = dpcourse.gather(pairs, "cpu")
    assert type(gathered) is Cache
    assert [list(t.shape) for t in gathered.items] == [[3, 3], [3]]


@pytest.mark.parametrize("output", [3, 2.5, "text"])
def test_gather_of_numbers_and_strings_says_what_to_return(output):
    with pytest.raises(TypeError, match=f"type {type(output).__name__}.*0-d tensor"):
        dpcourse.gather([output, output], "cpu")


@pytest.mark.parametrize("layout", [torch.channels_last, torch.contiguous_format])
def test_gather_keeps_the_memory_format_when_every_output_has_it(layout):
    outputs = [torch.randn(2, 3, 4, 5).to(memory_format=layout) for _ in range(2)]
    gathered = dpcourse.gather(outputs, "cpu")
    assert gathered.is_contiguous(memory_format=layout)
    mixed = dpcourse.gather([outputs[0], torch.randn(2, 3, 4, 5)], "cpu")
    assert mixed.is_contiguous()


def test_a_forward_and_backward_leave_no_reference_cycles():
    dp = dpcourse.DataParallel(torch.nn.Linear(4, 2), devices=dpcourse.devices(3))
    x = {"x": [torch.randn(9, 4)]}

    class Unpack(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = dp

        def forward(self, batch):
            return {"out": (self.inner(batch["x"][0]),)}

    model = Unpack()
    gc.collect()
    out = model(x)
    assert gc.collect() == 0
    out["out"][0].sum().backward()
    assert gc.collect() == 0
