# The core, mirror of torch/nn/parallel/parallel_apply.py.
"""Step 3 of DataParallel: run every replica on its chunk, one new Python thread per replica.

Mirrors ``torch/nn/parallel/parallel_apply.py``. Threads work because the heavy lifting (GPU kernels,
or CPU matmuls) releases the GIL; the Python code of each forward still runs one thread at a time,
which is why a model made of many small layers gains little from DataParallel.

Like torch, every call starts its threads and waits for them before it returns: a ``forward`` that itself
calls DataParallel simply starts threads of its own. A replica that hangs while the caller is interrupted
(Ctrl-C) keeps running until it ends, but the next call starts fresh threads and does not wait for it; at exit
Python waits for it (see "Differences from torch" in ``parallel_apply``).
"""

import contextlib
import sys
import threading
import traceback
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .devices import DeviceLike, as_devices

__all__ = ["ReplicaError", "parallel_apply"]


class _KeyErrorMessage(str):
    """A str whose repr is itself, so a re-raised KeyError prints its multi-line message readably."""

    def __repr__(self) -> str:
        return self


class ReplicaError:
    """The exception one replica raised, kept so the main thread can re-raise it with where it happened."""

    def __init__(self, replica: int, device: torch.device) -> None:
        exc_type, exc, tb = sys.exc_info()
        self.exc_type = exc_type
        self.original = "".join(traceback.format_exception(exc_type, exc, tb))
        # torch prints a CUDA device as its index ("on device 1"); a CPU device prints as "cpu".
        label = device.index if device.type == "cuda" else device.type
        self.where = f"in replica {replica} on device {label}"

    def reraise(self):
        """Raise the same exception type, with "Caught X in replica i on device d." and the original traceback."""
        message = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.original}"
        if self.exc_type is KeyError:
            message = _KeyErrorMessage(message)
        elif getattr(self.exc_type, "message", None):
            raise self.exc_type(message=message)
        try:
            exception = self.exc_type(message)
        except Exception:
            # The exception type needs other constructor arguments: say it in a RuntimeError instead.
            raise RuntimeError(message) from None
        raise exception


def _first_tensor_device(obj: Any) -> torch.device | None:
    if isinstance(obj, torch.Tensor):
        return obj.device
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
    for item in items:
        device = _first_tensor_device(item)
        if device is not None:
            return device
    return None


def _check_lengths(modules: Sequence, **others: Sequence) -> None:
    for name, values in others.items():
        if len(values) != len(modules):
            raise ValueError(
                f"parallel_apply got {len(modules)} modules but {len(values)} {name}: "
                f"give exactly one entry per replica."
            )


def parallel_apply(
    modules: Sequence[nn.Module],
    inputs: Sequence[Any],
    kwargs_tup: Sequence[dict] | None = None,
    devices: Sequence[DeviceLike] | None = None,
) -> list[Any]:
    """Call ``modules[i](*inputs[i], **kwargs_tup[i])`` on ``devices[i]``, all at once, and return the outputs.

    * One new thread per replica (named ``replica-i``), all joined before returning; a single replica runs
      inline in the calling thread.
    * Grad mode and autocast are thread-local, so they are read here and switched on again in each thread
      (a new thread starts with grad enabled, even inside ``torch.no_grad()``).
    * A bare input is wrapped as ``(input,)``; a tuple or list is unpacked as positional arguments.
    * If replicas fail, the lowest-numbered failure is re-raised in the caller as the same exception type,
      saying "Caught ValueError in replica 1 on device 1." followed by the original traceback.
    * ``devices=None`` takes each replica's device from its first input tensor (the CPU if there is none).

    Differences from torch, on purpose:

    * torch forwards only whether CUDA autocast is on, so in worker threads ``autocast(dtype=torch.bfloat16)``
      falls back to the thread default (float16 on CUDA). dpcourse forwards the flag *and* the dtype.
    * torch catches only ``Exception``: a ``SystemExit`` or ``KeyboardInterrupt`` ends its worker thread and
      the caller gets a bare ``KeyError``. dpcourse re-raises those like any other exception.
    * The caller waits for each replica's "finished" event, then joins the thread, where torch only joins. On
      Python 3.11 a Ctrl-C that lands inside ``Thread.join`` makes ``threading`` take a still-running thread for
      finished (``_wait_for_tstate_lock`` releases the running thread's lock); the interpreter then shuts down
      under it at exit and torch's C++ aborts the process ("terminate called without an active exception",
      exit 134). Interrupted in ``Event.wait``, the caller leaves the thread's state alone, and at exit Python
      waits for the blocked replica to end.
    * CPU replicas share the caller's intra-op threads (``torch.get_num_threads()``) equally, at least one
      each: otherwise 2 replicas on 2 cores run 4 busy threads that fight over the cores. torch never runs
      replicas on the CPU, so it has no such rule.
    """
    kwargs_tup = ({},) * len(modules) if kwargs_tup is None else kwargs_tup
    if devices is None:
        devices = [_first_tensor_device(x) or torch.device("cpu") for x in inputs]
    devices = as_devices(devices)
    _check_lengths(modules, inputs=inputs, kwargs_tup=kwargs_tup, devices=devices)
    grad_enabled = torch.is_grad_enabled()
    # Streams are thread-local too: take the caller's current stream of each GPU and use it in the worker.
    streams = [torch.cuda.current_stream(d) if d.type == "cuda" else None for d in devices]
    autocast_state = {t: (torch.is_autocast_enabled(t), torch.get_autocast_dtype(t)) for t in {d.type for d in devices}}
    caller_threads = torch.get_num_threads()
    cpu_share = max(1, caller_threads // max(1, sum(d.type == "cpu" for d in devices)))
    results: dict[int, Any] = {}
    finished = [threading.Event() for _ in modules]

    def run_replica(i: int, module: nn.Module, input: Any, kwargs: dict, device: torch.device, stream) -> None:
        enabled, dtype = autocast_state[device.type]
        autocast = torch.autocast(device.type, enabled=enabled, dtype=dtype)
        on_device = torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
        on_stream = torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()
        try:
            with torch.set_grad_enabled(grad_enabled), on_device, on_stream, autocast, _cpu_threads(device, cpu_share):
                args = input if isinstance(input, (list, tuple)) else (input,)
                results[i] = module(*args, **kwargs)
        except BaseException:  # torch catches only Exception: a SystemExit then kills its thread silently
            results[i] = ReplicaError(i, device)
        finally:
            finished[i].set()

    jobs = list(zip(range(len(modules)), modules, inputs, kwargs_tup, devices, streams, strict=True))
    if len(jobs) == 1:
        run_replica(*jobs[0])
    else:
        threads = [threading.Thread(target=run_replica, args=job, name=f"replica-{job[0]}") for job in jobs]
        try:
            for thread in threads:
                thread.start()
            for event in finished:  # not thread.join() alone: see "Differences from torch" above
                event.wait()
            for thread in threads:
                thread.join()
        finally:
            # set_num_threads also sets the count new threads start with: the caller's, even after Ctrl-C.
            torch.set_num_threads(caller_threads)

    outputs = []
    for i in range(len(jobs)):
        if isinstance(results[i], ReplicaError):
            results[i].reraise()
        outputs.append(results[i])
    return outputs


@contextlib.contextmanager
def _cpu_threads(device: torch.device, share: int):
    """Run a CPU replica with ``share`` intra-op threads, and give the count back when it is done."""
    if device.type != "cpu" or torch.get_num_threads() == share:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(share)
    try:
        yield
    finally:
        torch.set_num_threads(before)
