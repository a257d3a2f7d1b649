"""Experiments for lesson 15, memory per device: optimizer state, DataParallel's device 0, DDP's ranks.

Each runs the real thing and counts bytes with ``dpcourse.memory`` (see ``experiments`` for ``Outcome``).
"""

from dpcourse import memory, viz
from dpcourse.ddp.demos import memory as ddp_memory
from dpcourse.memory import MIB, Setup, sized_mlp

from ..outcome import Outcome, only_true

MODEL = sized_mlp()  # the lesson's MLP: 64 -> 512 -> 512 -> 512 -> 1000, about a million parameters
TENSORS = memory.parameter_tensors(MODEL)  # a weight and a bias per layer


def _state_after_one_step(optimizer: str) -> int:
    model = MODEL.build()
    x, y = MODEL.batch(8)
    step = memory.make_optimizer(optimizer, model.parameters())
    memory.loss_fn(model(x), y).backward()
    step.step()
    return memory.storage_bytes(memory.state_tensors(step))


def adam_state_bytes() -> Outcome:
    """One step of SGD and of Adam on the lesson's MLP; the bytes in each optimizer's ``state`` afterwards."""
    parameter_bytes = MODEL.parameters * 4
    sgd, adam = _state_after_one_step("SGD"), _state_after_one_step("Adam")
    extra = adam - sgd
    counters = extra - 2 * parameter_bytes
    text = (
        f"parameters: {MODEL.parameters:,} float32 = {parameter_bytes:,} bytes (P), in {TENSORS} tensors\n"
        f"state after one step: SGD {sgd:,} bytes, Adam {adam:,} bytes\n"
        f"Adam - SGD = {extra:,} bytes = {extra / parameter_bytes:.4f} P: exp_avg and exp_avg_sq (2 P) and "
        f"{counters} bytes of step counters ({counters // TENSORS} per tensor)"
    )
    value = only_true(
        {
            "None: like SGD, Adam keeps only the gradients and computes its averages from them": extra == 0,
            "As much as the parameters: one running average per parameter, like momentum": (
                abs(extra - parameter_bytes) < TENSORS * 8
            ),
            "Twice the parameters: two running averages per parameter, and a step counter per tensor": (
                counters == 4 * TENSORS
            ),
        }
    )
    return Outcome(text, value)


def dp_memory_per_device() -> Outcome:
    """DataParallel on 4 devices, Adam, batch 256: every kind of memory counted per device."""
    breakdown = memory.measure(Setup(kind="DataParallel", devices=4, batch=256, optimizer="Adam", model=MODEL))
    totals, parameters = breakdown.totals, [device["parameters"] for device in breakdown.devices]
    surplus = breakdown.surplus()
    text = (
        f"{breakdown.table()}\n"
        f"device 0 holds {totals[0] / totals[1]:.2f} times what device 1 holds; its surplus: "
        + ", ".join(f"{name} {value / MIB:.2f} MiB" for name, value in surplus.items() if value)
    )
    value = only_true(
        {
            "Device 0: it alone keeps the summed gradients, the optimizer state and the whole batch's outputs "
            "and loss": totals[0] > max(totals[1:]),
            "None: every device holds a full replica and a quarter of the batch, so all four hold the same": (
                max(totals) - min(totals) < 0.01 * max(totals)
            ),
            "None: DataParallel splits the parameters, so each device holds a quarter of the model": (
                4 * max(parameters) <= 1.01 * MODEL.parameters * 4  # a quarter of the float32 parameters
            ),
        }
    )
    return Outcome(text, value, viz.memory_bars([breakdown]))


def _model_state(device: dict[str, int]) -> int:
    return device["parameters"] + device["gradients"] + device["optimizer state"] + device["all-reduce buckets"]


def ddp_rank_memory() -> Outcome:
    """DDP on 2 real ranks and DataParallel on 2 devices, Adam, batch 256: each device's bytes, counted."""
    dp = memory.measure(Setup(kind="DataParallel", devices=2, batch=256, optimizer="Adam", model=MODEL))
    (ddp,) = ddp_memory.measure_ddp([Setup(kind="DDP", devices=2, batch=256, optimizer="Adam", model=MODEL)])
    rank, first = ddp.devices[0], dp.devices[0]
    ratio = _model_state(rank) / _model_state(first)
    text = (
        f"DataParallel, 2 devices:\n{dp.table()}\n\nDDP, 2 ranks (processes):\n{ddp.table()}\n\n"
        f"model state (parameters, gradients, optimizer state, buckets) of a DDP rank / of DataParallel's device 0: "
        f"{ratio:.3f}"
    )
    parameter_bytes = MODEL.parameters * 4
    value = only_true(
        {
            "Half as much: DDP splits the parameters and the optimizer state between the ranks": (
                rank["parameters"] <= parameter_bytes // 2
            ),
            "As little as DataParallel's device 1: a replica and its gradients, no optimizer state": (
                rank["optimizer state"] == 0
            ),
            "More: every rank also keeps every other rank's gradients, to add them up": (
                rank["gradients"] >= 2 * parameter_bytes
            ),
            "About as much as DataParallel's device 0: the whole model, its gradients, the optimizer state, and "
            "all-reduce buckets as large as the gradients": (
                abs(ratio - 1) < 0.1 and rank["parameters"] == parameter_bytes
            ),
        }
    )
    return Outcome(text, value, viz.memory_bars([dp, ddp]))


EXPERIMENTS = (adam_state_bytes, dp_memory_per_device, ddp_rank_memory)
