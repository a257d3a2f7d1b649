"""parallel_apply: threads, inline single replica, grad mode / autocast propagation, error re-raising."""

import threading

import pytest
import torch
from torch import nn

import dpcourse


class Probe(nn.Module):
    """Returns what the replica saw: its thread, grad mode and autocast state."""

    def forward(self, x, scale=1):
        self.seen = dict(
            thread=threading.current_thread().name,
            grad=torch.is_grad_enabled(),
            autocast=torch.is_autocast_enabled("cpu"),
            dtype=torch.get_autocast_dtype("cpu"),
        )
        return x * scale, self.seen


class FailsOn(nn.Module):
    def __init__(self, error):
        super().__init__()
        self.error = error

    def forward(self, x):
        if x.shape[0] == 1:
            raise self.error
        return x


class TwoArgError(Exception):
    def __init__(self, a, b):
        super().__init__(a, b)


def run(modules, n=None, **kwargs):
    n = n or len(modules)
    inputs = [torch.ones(2, 1)] * n
    return dpcourse.parallel_apply(modules, inputs, devices=dpcourse.devices(n), **kwargs)


def test_one_thread_per_replica_and_inline_for_one():
    outputs = run([Probe() for _ in range(3)])
    threads = {seen["thread"] for _, seen in outputs}
    assert len(threads) == 3 and threading.current_thread().name not in threads
    (_, seen), = run([Probe()])
    assert seen["thread"] == threading.current_thread().name


def test_grad_mode_is_carried_into_the_threads():
    with torch.no_grad():
        outputs = run([Probe(), Probe()])
    assert [seen["grad"] for _, seen in outputs] == [False, False]


def test_autocast_enabled_flag_and_dtype_are_carried_into_the_threads():
    with torch.autocast("cpu", dtype=torch.float16):
        outputs = run([Probe(), Probe()])
    assert [(seen["autocast"], seen["dtype"]) for _, seen in outputs] == [(True, torch.float16)] * 2


def test_kwargs_and_bare_inputs():
    outputs = dpcourse.parallel_apply(
        [Probe(), Probe()], [torch.ones(1), (torch.ones(1), 3)], [{"scale": 2}, {}], dpcourse.devices(2)
    )
    assert [out.item() for out, _ in outputs] == [2.0, 3.0]


def test_devices_default_to_the_inputs_device():
    outputs = dpcourse.parallel_apply([Probe(), Probe()], [torch.ones(1), (4,)])
    assert outputs[1][0] == 4


@pytest.mark.parametrize(
    "error, raised, first_line",
    [
        (ValueError("bad"), ValueError, "Caught ValueError in replica 1 on device cpu."),
        (KeyError("k"), KeyError, "Caught KeyError in replica 1 on device cpu."),
        (StopIteration(), StopIteration, "Caught StopIteration in replica 1 on device cpu."),
        (TwoArgError(1, 2), RuntimeError, "Caught TwoArgError in replica 1 on device cpu."),
    ],
)
def test_the_first_failing_replica_is_reraised_with_where_it_happened(error, raised, first_line):
    modules = [FailsOn(error), FailsOn(error), FailsOn(error)]
    inputs = [torch.ones(2), torch.ones(1), torch.ones(1)]
    with pytest.raises(raised) as info:
        dpcourse.parallel_apply(modules, inputs, devices=dpcourse.devices(3))
    text = info.value.args[0]
    assert text.splitlines()[0] == first_line
    assert text.splitlines()[1] == "Original Traceback (most recent call last):"
    assert "in forward" in text and "raise self.error" in text


def test_a_single_failing_replica_inline_is_also_wrapped():
    with pytest.raises(ValueError, match="Caught ValueError in replica 0 on device cpu"):
        dpcourse.parallel_apply([FailsOn(ValueError("x"))], [torch.ones(1)], devices=["cpu"])


def test_a_base_exception_in_a_thread_is_reraised_too():
    class Exit(nn.Module):
        def forward(self, x):
            raise SystemExit(3)

    with pytest.raises(SystemExit, match="Caught SystemExit in replica 0 on device cpu"):
        dpcourse.parallel_apply([Exit(), Exit()], [torch.ones(1)] * 2, devices=dpcourse.devices(2))
    assert dpcourse.parallel_apply([Probe(), Probe()], [torch.ones(1)] * 2)[1][0].item() == 1.0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(inputs=[1]), "2 modules but 1 inputs"),
        (dict(inputs=[1, 2], kwargs_tup=[{}]), "2 modules but 1 kwargs_tup"),
        (dict(inputs=[1, 2], devices=["cpu"]), "2 modules but 1 devices"),
    ],
)
def test_length_mismatches_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        dpcourse.parallel_apply([Probe(), Probe()], **kwargs)
