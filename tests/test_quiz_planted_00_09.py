"""Lessons 00-09's quiz experiments, each run in a planted world where a wrong answer is true: a scatter with
another chunk rule, a replicate that deep-copies or keeps the model as replica 0, a backward that averages, a
gather that adds... The experiment must then measure that wrong answer (``tests/quiz_planting.py``).

The plants replace one of DataParallel's steps (its overridable methods, as a subclass would) or the function
the experiment calls, and call the real one where they can.
"""

import collections
import importlib
import threading

import pytest
import torch
from torch import nn
from torch.nn import functional

from dpcourse import _functions
from dpcourse.data_parallel import DataParallel
from dpcourse.quiz.experiments import lesson02, lesson03, lesson09
from tests.quiz_planting import deep_copies, even_split, one_chunk, planted, reports, scatter_by

REAL_REPLICATE = DataParallel.replicate
REAL_GATHER = DataParallel.gather


def replica_0_is_the_model(self, module, devices):
    return [module, *REAL_REPLICATE(self, module, devices)[1:]]


def without_the_shortcut(self, *inputs, **kwargs):
    """DataParallel's forward with no one-device shortcut: even one device gets a replica and a gather."""
    inputs, module_kwargs = self.scatter(inputs, kwargs, self.devices)
    replicas = self.replicate(self.module, self.devices[: len(inputs)])
    return self.gather(self.parallel_apply(replicas, inputs, module_kwargs), self.output_device)


@planted("00-laptop-passthrough")
def test_a_dataparallel_that_split_over_cores_would_be_measured_as_splitting(monkeypatch):
    class OverCores(nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module, self.device_ids = module, [0, 1]

        def forward(self, x):
            return self.module(x)

    monkeypatch.setattr(torch.nn, "DataParallel", OverCores)
    reports("00-laptop-passthrough", "It splits `x` over the CPU cores")


@planted("00-laptop-passthrough")
def test_a_dataparallel_that_refused_a_laptop_would_be_measured_as_raising(monkeypatch):
    def refuses(module):
        raise RuntimeError("no GPU")

    monkeypatch.setattr(torch.nn, "DataParallel", refuses)
    reports("00-laptop-passthrough", "It raises an error: DataParallel needs a GPU")


@planted("00-four-steps")
def test_a_forward_that_replicated_first_would_be_traced_in_that_order(monkeypatch):
    def replicate_first(self, *inputs, **kwargs):
        replicas = self.replicate(self.module, self.devices)
        inputs, module_kwargs = self.scatter(inputs, kwargs, self.devices)
        return self.gather(self.parallel_apply(replicas[: len(inputs)], inputs, module_kwargs), self.output_device)

    monkeypatch.setattr(DataParallel, "forward", replicate_first)
    reports("00-four-steps", "replicate → scatter → parallel_apply → gather")


@planted("01-one-device-counter")
def test_one_device_without_the_shortcut_would_lose_the_count(monkeypatch):
    monkeypatch.setattr(DataParallel, "forward", without_the_shortcut)
    reports("01-one-device-counter", 0)


@planted("01-one-device-scalar")
def test_one_device_without_the_shortcut_would_gather_a_vector(monkeypatch):
    monkeypatch.setattr(DataParallel, "forward", without_the_shortcut)
    reports("01-one-device-scalar", (1,))


@planted("02-ten-rows-four-devices")
def test_a_scatter_that_split_evenly_would_be_measured_as_3_3_2_2(monkeypatch):
    monkeypatch.setattr(lesson02, "scatter", lambda tensor, devices: list(even_split(tensor, len(devices))))
    reports("02-ten-rows-four-devices", "3, 3, 2, 2")


@planted("02-six-rows-four-devices")
def test_a_scatter_that_split_evenly_would_run_4_replicas(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(even_split))
    reports("02-six-rows-four-devices", 4)


@planted("02-mismatched-batches")
def test_a_scatter_that_gave_every_argument_4_chunks_would_return_every_row(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(even_split))  # b's 3 rows: 1, 1, 1, 0
    reports("02-mismatched-batches", 8)


@planted("02-keyword-missing-argument")
def test_a_scatter_that_cut_keywords_to_the_chunks_would_work(monkeypatch):
    def cut_to_the_chunks(self, inputs, kwargs, devices):
        chunks, keywords = scatter_by(lambda t, n: t.chunk(n))(self, inputs, kwargs, devices)
        return chunks, keywords[: len(chunks)]

    monkeypatch.setattr(DataParallel, "scatter", cut_to_the_chunks)
    reports("02-keyword-missing-argument", "It works: 3 replicas run and the 4th device idles")


@planted("02-lstm-hidden-state")
def test_a_scatter_that_split_the_state_on_its_batch_dim_would_work(monkeypatch):
    def state_on_dim_1(self, inputs, kwargs, devices):
        x, h0, c0 = inputs
        entries = tuple(zip(x.chunk(len(devices)), h0.chunk(len(devices), 1), c0.chunk(len(devices), 1), strict=True))
        return entries, tuple({} for _ in entries)

    monkeypatch.setattr(DataParallel, "scatter", state_on_dim_1)
    reports(
        "02-lstm-hidden-state",
        "It works: DataParallel splits each tensor along its own batch dim, so `h0` is split on dim 1",
    )


@planted("03-counter-lost")
def test_a_replicate_whose_replica_0_were_the_model_would_keep_its_count(monkeypatch):
    monkeypatch.setattr(DataParallel, "replicate", replica_0_is_the_model)
    reports("03-counter-lost", 3)


@planted("03-list-shared")
def test_deep_copied_replicas_would_append_to_lists_of_their_own(monkeypatch):
    monkeypatch.setattr(DataParallel, "replicate", deep_copies)
    reports("03-list-shared", 0)


@planted("03-parameters-empty")
def test_a_replica_0_that_were_the_model_would_see_its_parameters(monkeypatch):
    monkeypatch.setattr(DataParallel, "replicate", replica_0_is_the_model)
    reports("03-parameters-empty", 2)


@planted("03-replica-zero-shares")
def test_deep_copied_replicas_would_all_be_fresh_copies(monkeypatch):
    monkeypatch.setattr(lesson03, "replicate", lambda module, devices: deep_copies(None, module, devices))
    reports("03-replica-zero-shares", "None: every replica is a fresh copy")


@planted("04-error-message")
def test_a_parallel_apply_that_dropped_failed_replicas_would_lose_their_rows(monkeypatch):
    def dropping_failures(self, replicas, inputs, kwargs):
        outputs = []
        for replica, args in zip(replicas, inputs, strict=True):
            try:
                outputs.append(replica(*args))
            except ValueError:
                pass
        return outputs

    monkeypatch.setattr(DataParallel, "parallel_apply", dropping_failures)
    reports("04-error-message", "Nothing: replica 1's rows are just missing from the output")


@planted("04-threads")
def test_a_parallel_apply_without_threads_would_run_the_replicas_in_turn(monkeypatch):
    def in_turn(self, replicas, inputs, kwargs):
        return [replica(*args, **kw) for replica, args, kw in zip(replicas, inputs, kwargs, strict=True)]

    monkeypatch.setattr(DataParallel, "parallel_apply", in_turn)
    outcome = reports("04-threads", "One thread runs the replicas one after another")
    assert threading.current_thread().name in outcome.text


@planted("04-hook-count")
def test_replicas_without_the_models_hooks_would_fire_none(monkeypatch):
    def without_hooks(self, module, devices):
        replicas = REAL_REPLICATE(self, module, devices)
        for replica in replicas:
            replica._forward_hooks = collections.OrderedDict()
        return replicas

    monkeypatch.setattr(DataParallel, "replicate", without_hooks)
    reports("04-hook-count", 0)


@planted("05-scalar-loss-shape")
def test_a_scatter_that_split_evenly_would_gather_4_scalars(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(even_split))
    reports("05-scalar-loss-shape", (4,))


@planted("05-gather-concatenates")
def test_a_gather_that_added_the_outputs_would_return_5_sums(monkeypatch):
    monkeypatch.setattr(DataParallel, "gather", lambda self, outputs, device: sum(o.to(device) for o in outputs))
    reports("05-gather-concatenates", (5,))


@planted("05-packed-lstm")
def test_a_gather_that_padded_equal_chunks_would_be_fixed_by_a_divisible_batch(monkeypatch):
    """A gather that pads the replicas' sequences to the longest, but refuses chunks of different sizes: then a
    divisible batch is the fix, and sorting or total_length alone are not."""

    def pads_equal_chunks(self, outputs, device):
        if len({out.shape[0] for out in outputs}) > 1:
            raise RuntimeError("the replicas returned different batch sizes")
        steps = max(out.shape[1] for out in outputs)
        return torch.cat([functional.pad(out, (0, 0, 0, steps - out.shape[1])).to(device) for out in outputs])

    monkeypatch.setattr(DataParallel, "gather", pads_equal_chunks)
    reports("05-packed-lstm", "Use a batch size divisible by the number of devices")


def averaging_backward(ctx, *grad_outputs):
    """``Broadcast.backward`` that averages the replicas' gradients instead of summing them."""
    summed = _functions.ReduceAdd.apply(ctx.input_device, ctx.num_inputs, *grad_outputs)
    replicas = len(grad_outputs) // ctx.num_inputs
    return (None, *(g / replicas for g in summed))


@planted("06-gradients-summed")
def test_a_backward_that_averaged_would_be_measured_as_averaging(monkeypatch):
    monkeypatch.setattr(_functions.Broadcast, "backward", staticmethod(averaging_backward))
    reports("06-gradients-summed", "They are averaged over the replicas")


@planted("06-mean-loss-matches")
def test_a_backward_that_averaged_would_give_a_quarter(monkeypatch):
    monkeypatch.setattr(_functions.Broadcast, "backward", staticmethod(averaging_backward))
    reports("06-mean-loss-matches", "A quarter of the single-device gradient")


@planted("06-sum-of-replica-losses")
def test_a_backward_that_averaged_would_undo_the_doubling(monkeypatch):
    monkeypatch.setattr(_functions.Broadcast, "backward", staticmethod(averaging_backward))
    reports("06-sum-of-replica-losses", 1.0)


@planted("07-state-dict-keys")
def test_a_wrapper_that_saved_the_module_itself_would_have_bare_keys(monkeypatch):
    monkeypatch.setattr(DataParallel, "state_dict", lambda self, *args, **kwargs: self.module.state_dict())
    reports("07-state-dict-keys", "['weight', 'bias']")


@planted("07-placement")
def test_a_wrapper_that_checked_placement_when_built_would_raise_there(monkeypatch):
    real = DataParallel.__init__

    def checks_at_once(self, module, devices=None, *args, **kwargs):
        real(self, module, devices, *args, **kwargs)
        if any(p.device != self.devices[0] for p in module.parameters()):
            raise RuntimeError("the module is not on devices[0]")

    monkeypatch.setattr(DataParallel, "__init__", checks_at_once)
    reports("07-placement", "When you wrap it: `DataParallel(model, devices)` raises")


@planted("07-lone-sample-weight")
def test_a_dataparallel_that_did_not_split_would_weigh_every_sample_equally(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(one_chunk))
    reports("07-lone-sample-weight", pytest.approx(0.1))


@planted("07-batchnorm-last-chunk")
def test_a_scatter_that_split_evenly_would_give_batchnorm_two_rows(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(even_split))
    reports("07-batchnorm-last-chunk", "It trains normally")


@planted("07-plain-tensor-stays")
def test_a_to_that_moved_every_tensor_attribute_would_move_it(monkeypatch):
    real = nn.Module.to

    def moves_every_tensor(self, *args, **kwargs):
        moved = real(self, *args, **kwargs)
        for module in moved.modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, torch.Tensor):
                    setattr(module, name, value.to(*args, **kwargs))
        return moved

    monkeypatch.setattr(nn.Module, "to", moves_every_tensor)
    reports("07-plain-tensor-stays", "On `device`, like the parameters")


@planted("08-not-model-parallel")
def test_replicas_that_each_held_some_layers_would_be_measured_as_model_parallel(monkeypatch):
    def some_layers_each(self, module, devices):
        replicas = REAL_REPLICATE(self, module, devices)
        for i, replica in enumerate(replicas):
            kept = [(name, layer) for j, (name, layer) in enumerate(replica._modules.items()) if j % len(replicas) == i]
            replica._modules = collections.OrderedDict(kept)
        return replicas

    monkeypatch.setattr(DataParallel, "replicate", some_layers_each)
    reports("08-not-model-parallel", "Yes: each device holds some of the layers")


@planted("08-padding-fine")
def test_a_gather_that_trimmed_the_padding_would_be_measured_as_trimming(monkeypatch):
    monkeypatch.setattr(DataParallel, "gather", lambda self, outputs, device: REAL_GATHER(self, outputs, device)[:, :5])
    reports("08-padding-fine", "It works but trims the padding")


@planted("08-batchnorm-running-mean")
def test_a_dataparallel_that_did_not_split_would_keep_the_full_batch_mean(monkeypatch):
    monkeypatch.setattr(DataParallel, "scatter", scatter_by(one_chunk))
    reports("08-batchnorm-running-mean", 5.0)


@planted("09-replicate-each-forward")
def test_a_dataparallel_that_kept_its_replicas_would_replicate_once(monkeypatch):
    replicate_module = importlib.import_module("dpcourse.replicate")  # the module: dpcourse.replicate is the function
    kept = {}

    def replicate_once(module, devices, detach=False):
        if id(module) not in kept:
            kept[id(module)] = replicate_module.replicate(module, devices, detach)  # traced: the trace swaps it
        return kept[id(module)]

    monkeypatch.setattr(importlib.import_module("dpcourse.data_parallel"), "replicate", replicate_once)
    reports("09-replicate-each-forward", 1)


@planted("09-replicate-bytes")
def test_a_replicate_that_copied_replica_0_too_would_copy_4_times(monkeypatch):
    real = lesson09.replicate
    monkeypatch.setattr(lesson09, "replicate", lambda module, devices: real(module, [devices[0], *devices])[1:])
    reports("09-replicate-bytes", 4 * 263_168)
