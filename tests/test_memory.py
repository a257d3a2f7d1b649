"""dpcourse.memory: the calculator against torch's own accounting, and the accounting against torch.

The oracle is torch: the bytes of the tensors a real step keeps (parameters, ``.grad``, ``optimizer.state``), what
autograd hands to ``saved_tensors_hooks``, the profiler's allocation events, DDP's own report of its buckets and, on
a GPU, ``torch.cuda.max_memory_allocated``. ``memory.predict`` must come within 10% of ``memory.measure`` on every
device of every setup below.
"""

import math

import pytest
import torch

import dpcourse
from dpcourse import examples, memory
from dpcourse.ddp.demos.memory import measure_ddp, measure_ranks
from dpcourse.memory import CATEGORIES, Setup, sized_mlp
from dpcourse.memory.peak import allocations

SMALL = sized_mlp(width=128, depth=3, classes=100)
BOUND = 0.10  # the calculator's promise: within 10% of the measurement, on every device

SETUPS = {
    "one device, Adam": Setup(),
    "one device, SGD, big batch": Setup(batch=1024, optimizer="SGD", model=SMALL),
    "one device, momentum, 32000 classes": Setup(batch=32, optimizer="SGD with momentum",
                                                 model=sized_mlp(width=64, depth=2, classes=32000)),
    "DataParallel x4, Adam": Setup(kind="DataParallel", devices=4),
    "DataParallel x3, uneven chunks": Setup(kind="DataParallel", devices=3, batch=10, optimizer="SGD", model=SMALL),
    "DataParallel x4, fewer chunks than devices": Setup(kind="DataParallel", devices=4, batch=2, model=SMALL),
    "DataParallel x1": Setup(kind="DataParallel", devices=1, batch=64, model=SMALL),
    "DDP x2, Adam": Setup(kind="DDP", devices=2),
    "DDP x3, uneven batch, bucket view": Setup(kind="DDP", devices=3, batch=10, optimizer="SGD with momentum",
                                               model=SMALL, bucket_view=True),
}


@pytest.fixture(scope="module")
def measured() -> dict[str, memory.Breakdown]:
    measured = {name: memory.measure(setup) for name, setup in SETUPS.items() if setup.kind != "DDP"}
    ddp = {name: setup for name, setup in SETUPS.items() if setup.kind == "DDP"}
    for name, setup in ddp.items():  # each alone: the next test checks that one launch measures the same
        (measured[name],) = measure_ddp([setup])
    return measured


def test_ddp_is_measured_in_its_ranks_and_memory_measure_says_where():
    with pytest.raises(ValueError, match=r"dpcourse.ddp.demos.memory.measure_ddp\(\[setup\]\)"):
        memory.measure(Setup(kind="DDP", devices=2))


def test_several_ddp_setups_in_one_launch_measure_as_each_alone(measured):
    both = measure_ddp([SETUPS["DDP x2, Adam"], Setup(kind="DDP", devices=2, model=SMALL, batch=8)])
    assert both[0].devices == measured["DDP x2, Adam"].devices
    assert both[1].devices == memory.predict(both[1].setup).devices


@pytest.mark.parametrize("name", SETUPS)
def test_the_calculator_is_within_10_percent_of_the_measurement_on_every_device(measured, name):
    predicted, counted = memory.predict(SETUPS[name]), measured[name]
    assert len(predicted.devices) == len(counted.devices) == SETUPS[name].devices
    for i, (want, got) in enumerate(zip(counted.devices, predicted.devices, strict=True)):
        total = sum(want.values())
        assert math.isclose(sum(got.values()), total, rel_tol=BOUND), (name, i, got, want)
        for kind in CATEGORIES:  # and no kind is off by more than 10% of the device's total
            assert abs(got[kind] - want[kind]) <= BOUND * total, (name, i, kind, got[kind], want[kind])


def test_optimizer_state_is_what_torch_keeps_none_one_or_two_copies_and_adams_step_counters(measured):
    parameter_bytes = Setup().model.parameters * 4
    for optimizer, copies, counters in [("SGD", 0, 0), ("SGD with momentum", 1, 0), ("Adam", 2, 4 * 8)]:
        model = sized_mlp().build()
        step = memory.make_optimizer(optimizer, model.parameters())
        memory.loss_fn(model(sized_mlp().batch(4)[0]), sized_mlp().batch(4)[1]).backward()
        step.step()
        assert memory.storage_bytes(memory.state_tensors(step)) == copies * parameter_bytes + counters
    assert measured["one device, Adam"].devices[0]["optimizer state"] == 2 * parameter_bytes + 32


def test_dataparallel_device0_holds_the_model_once_two_sets_of_gradients_and_all_the_optimizer_state(measured):
    dp = measured["DataParallel x4, Adam"]
    parameter_bytes = Setup().model.parameters * 4
    first, others = dp.devices[0], dp.devices[1:]
    assert first["parameters"] == parameter_bytes  # replica 0 is the model: no second copy
    assert first["gradients"] == 2 * parameter_bytes  # its replica's gradients and their sum
    assert all(d["parameters"] == d["gradients"] == parameter_bytes for d in others)
    assert all(d["optimizer state"] == d["outputs and loss"] == 0 for d in others)
    assert dp.totals[0] > 2 * max(dp.totals[1:])
    surplus = dp.surplus()
    one = measured["one device, Adam"].devices[0]
    assert surplus["gradients"] + surplus["optimizer state"] + surplus["outputs and loss"] == sum(surplus.values())
    assert [surplus[k] for k in ("gradients", "optimizer state", "outputs and loss")] == [
        one["gradients"], one["optimizer state"], one["outputs and loss"]]


def test_activations_split_with_the_chunks_and_idle_devices_hold_nothing(measured):
    uneven = measured["DataParallel x3, uneven chunks"]
    per_sample = memory.saved_per_sample(SMALL) * 4
    assert [d["activations"] for d in uneven.devices] == [4 * per_sample, 4 * per_sample, 2 * per_sample]
    idle = measured["DataParallel x4, fewer chunks than devices"]
    assert idle.totals[2:] == [0, 0] and all(idle.totals[:2])


def test_dataparallel_on_one_device_is_one_device(measured):
    one = memory.measure(Setup(batch=64, model=SMALL))
    assert measured["DataParallel x1"].devices == one.devices


def test_ddp_ranks_are_equal_and_the_bucket_view_saves_exactly_the_gradients(measured):
    ddp = measured["DDP x2, Adam"]
    assert ddp.devices[0] == ddp.devices[1]
    assert ddp.devices[0]["all-reduce buckets"] == ddp.devices[0]["gradients"] == Setup().model.parameters * 4
    viewed = measured["DDP x3, uneven batch, bucket view"]
    assert all(d == viewed.devices[0] for d in viewed.devices) and viewed.devices[0]["all-reduce buckets"] == 0
    (default,) = measure_ddp([Setup(kind="DDP", devices=3, batch=10, optimizer="SGD with momentum", model=SMALL)])
    assert default.totals[0] - viewed.totals[0] == viewed.devices[0]["gradients"]


def test_counting_does_not_change_training():
    # The oracle: one device on the whole batch. CountingDataParallel must train exactly like DataParallel.
    model, x, y = SMALL.build(), *SMALL.batch(12)
    reference = SMALL.build()
    counted = memory.CountingDataParallel(model, dpcourse.devices(3))
    memory.loss_fn(counted(x), y).backward()
    memory.loss_fn(reference(x), y).backward()
    for p, q in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6)
    assert len(counted.gradients) == 3 and counted.copies_alive == 0


def test_replica_copies_share_one_buffer_that_outlives_most_of_the_backward():
    found = memory.copies_and_gradients(Setup(kind="DataParallel", devices=2, batch=8, model=SMALL))
    assert found["copy storages"] == 1  # views of one flat buffer (dpcourse/comm.py: _copy_bucket)
    assert found["copy views alive"] == 0 and found["copy storages alive"] == 0  # all gone at the sum
    # but the buffer was alive when the second Linear's backward began (it saved its weight, a view), after the
    # gradients of every later layer were computed; the first Linear saved no weight (its input needs no gradient)
    linears = [layer for layer in SMALL.build() if isinstance(layer, torch.nn.Linear)]
    later = sum(p.numel() * 4 for layer in linears[2:] for p in layer.parameters())
    assert found["gradients with copies alive"] == later > 0


def test_the_profiler_sees_exactly_what_the_saved_tensor_hooks_count():
    # Allocated during forward and loss and still allocated after them: the saved tensors, the output and the loss.
    model = sized_mlp().build()
    x, y = sized_mlp().batch(32)
    recorders = []

    def forward_and_loss():
        recorder = memory.SavedTensors(exclude=list(model.parameters()))
        with recorder:
            output = model(x)
            loss = memory.loss_fn(output, y)
        recorder.add(output)
        recorder.add(loss)
        recorders.append((recorder, output, loss))  # keeps them allocated past the profile

    changes, _ = allocations(forward_and_loss)
    recorder = recorders[0][0]
    assert sum(changes) == recorder.bytes - x.nbytes - y.nbytes  # the batch was allocated before


def test_the_profilers_peak_is_within_10_percent_of_the_kinds_added_up_for_the_lessons_model():
    steps = memory.profile_step(Setup())
    assert set(steps.phases) == {"forward", "loss", "backward", "optimizer step"}
    assert steps.peak_phase == "optimizer step"  # Adam's foreach sqrt of exp_avg_sq, on top of everything
    assert math.isclose(steps.peak, memory.predict(Setup()).totals[0], rel_tol=BOUND)


BAD = [
    (lambda: Setup(batch=float("nan")), "batch must be a whole number >= 1 (samples per step, all devices together); "
                                        "got nan."),
    (lambda: Setup(batch=-3), "batch must be a whole number >= 1"),
    (lambda: Setup(kind="DataParallel", devices=0), "devices must be a whole number >= 1 (replicas or ranks); got 0."),
    (lambda: sized_mlp(width=0), "width must be a whole number >= 1 (units per hidden layer); got 0."),
    (lambda: sized_mlp(depth=2.5), "depth must be a whole number >= 1 (Linear layers); got 2.5."),
    (lambda: sized_mlp(classes=float("inf")), "classes must be a whole number >= 1 (outputs per sample); got inf."),
    (lambda: sized_mlp(features=True), "features must be a whole number >= 1"),
    (lambda: Setup(optimizer="adam"), "optimizer='adam' is not one of ['SGD', 'SGD with momentum', 'Adam']."),
    (lambda: Setup(kind="FSDP"), "kind='FSDP' is not one of ['one device', 'DataParallel', 'DDP', 'ZeRO-1', 'ZeRO-2', "
                                  "'ZeRO-3', 'FSDP2, no reshard']."),
    (lambda: Setup(devices=2), "devices=2 with kind='one device': use kind='DataParallel', 'DDP' or a ZeRO stage."),
    (lambda: Setup(model="big"), "model must be a dpcourse.examples.MLP, got str."),
    (lambda: Setup(model=examples.MLP((8, 16, 4), batchnorm=True)), "model=MLP(widths=(8, 16, 4), batchnorm=True, "
                                                                    "relu=True): memory counts Linear layers"),
]


@pytest.mark.parametrize(("make", "message"), BAD, ids=[message.split()[0] for _, message in BAD])
def test_an_input_that_makes_no_sense_raises_a_value_error_naming_it(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message)


def test_a_whole_float_is_read_as_a_whole_number():
    assert Setup(batch=256.0).batch == 256 and isinstance(Setup(batch=256.0).batch, int)


def test_measure_ranks_refuses_a_setup_that_is_not_ddp_or_on_other_ranks():
    with pytest.raises(ValueError, match="measure_ranks runs DDP on one set of ranks"):
        measure_ranks([Setup()])
    with pytest.raises(ValueError, match="devices=2"):
        measure_ranks([Setup(kind="DDP", devices=2), Setup(kind="DDP", devices=3)])


# On a GPU: torch.cuda.max_memory_allocated, per device. The model is large (about 170 MiB of parameters, in
# 16 MiB weights) and the batch small, so that what the accounting leaves out stays small next to it: the gradient
# flowing through a layer, and under DataParallel one replica's weight gradient copied to device 0 to be added
# (dpcourse/comm.py: sum_bucket). Plain SGD: its foreach step allocates nothing.
GPU_MODEL = sized_mlp(width=2048, depth=12)


@pytest.mark.cuda
def test_one_gpus_peak_is_within_10_percent_of_the_prediction():
    setup = Setup(batch=16, optimizer="SGD", model=GPU_MODEL)
    (peak,) = memory.cuda_peaks(setup)
    assert math.isclose(peak, memory.predict(setup).totals[0], rel_tol=BOUND)


@pytest.mark.cuda
def test_dataparallel_on_two_gpus_device0_peaks_as_predicted_and_above_device1_by_the_surplus():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs, one per replica")
    setup = Setup(kind="DataParallel", devices=2, batch=16, optimizer="SGD", model=GPU_MODEL)
    peaks, predicted = memory.cuda_peaks(setup), memory.predict(setup)
    assert math.isclose(peaks[0], predicted.totals[0], rel_tol=BOUND)
    # Device 1's copies are freed before its gradients are summed, so it peaks at most at its kinds added up.
    assert peaks[1] <= (1 + BOUND) * predicted.totals[1]
    assert peaks[0] - peaks[1] >= (1 - BOUND) * sum(predicted.surplus().values())


@pytest.mark.cuda
def test_a_ddp_rank_on_a_gpu_peaks_as_predicted():
    setup = Setup(kind="DDP", devices=1, batch=16, optimizer="SGD", model=GPU_MODEL)
    ((rank,),) = measure_ranks([setup], backend="nccl")
    assert math.isclose(rank["cuda_peak"], memory.predict(setup).totals[0], rel_tol=BOUND)
