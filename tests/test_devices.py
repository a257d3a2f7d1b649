"""devices(n) and device normalisation."""

import pytest
import torch

import dpcourse
from dpcourse.devices import as_device, as_devices, usable_gpus


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU mode")
def test_without_a_gpu_devices_are_cpu_replicas():
    assert dpcourse.devices(3) == [torch.device("cpu")] * 3


@pytest.mark.cuda
def test_with_gpus_replicas_share_them_round_robin(monkeypatch):
    monkeypatch.delenv("DPCOURSE_DEVICES", raising=False)
    gpus = torch.cuda.device_count()
    assert dpcourse.devices(gpus + 1) == [torch.device("cuda", i % gpus) for i in range(gpus + 1)]


def test_cpu_devices_can_be_forced(monkeypatch):
    monkeypatch.setenv("DPCOURSE_DEVICES", "cpu")
    assert dpcourse.devices(2) == [torch.device("cpu")] * 2 and usable_gpus() == 0


def test_device_spellings():
    assert as_devices(["cpu", torch.device("cpu")]) == [torch.device("cpu")] * 2


@pytest.mark.parametrize("n", [0, -1, 1.5, True, "2"])
def test_devices_needs_a_positive_count(n):
    with pytest.raises(ValueError, match="n >= 1"):
        dpcourse.devices(n)


@pytest.mark.parametrize(
    "device, error, message",
    [
        ("tpu", ValueError, "Unknown device 'tpu'"),
        ("meta", ValueError, "not on meta"),
        (-1, ValueError, "negative"),
        (1.0, TypeError, "got 1.0 of type float"),
        (0 if not torch.cuda.is_available() else 10_000, ValueError, "cuda:"),
    ],
)
def test_bad_devices_are_named(device, error, message):
    with pytest.raises(error, match=message):
        as_device(device)


def test_data_parallel_uses_the_gpus_that_devices_does(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # two GPUs, as far as dpcourse can tell
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("DPCOURSE_DEVICES", "cpu")
    assert dpcourse.devices(2) == [torch.device("cpu")] * 2
    with pytest.raises(RuntimeError, match="found no GPU"):
        dpcourse.data_parallel(torch.nn.Linear(2, 2), torch.ones(2, 2))
    monkeypatch.delenv("DPCOURSE_DEVICES")
    assert dpcourse.devices(2) == [torch.device("cuda", 0), torch.device("cuda", 1)]
    with pytest.raises(RuntimeError, match="on device cuda:0"):  # it chose the GPUs, where the module is not
        dpcourse.data_parallel(torch.nn.Linear(2, 2), torch.ones(2, 2))
