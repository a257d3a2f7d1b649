"""Start one process per rank, from a notebook cell or a script, and bring each rank's result back.

``launch(worker, world_size)`` does on one machine what ``torchrun`` does, with ``torch.multiprocessing``:

1. pick a free port on 127.0.0.1 for the rendezvous (rank 0 hosts a ``TCPStore`` there);
2. start ``world_size`` processes, never by plain ``fork`` (a forked child inherits the parent's threads
   and CUDA state, which breaks it). The worker is sent by name, so it must be importable: a function
   defined in a notebook cell is not, which is why every worker lives in ``dpcourse.ddp``;
3. in each: set the environment variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
   ``MASTER_ADDR``, ``MASTER_PORT``), call ``init_from_env()``, run ``worker(*args)``, save its result;
4. wait for all of them, with a deadline; on the first failure stop the others and raise ``WorkerError``.

The environment is the same as under torchrun, so a worker runs unchanged there (``dpcourse.scripts.train_ddp``).

No orphans: ``ProcessContext.join`` (``torch/multiprocessing/spawn.py``) stops the other ranks when one
fails; ``launch`` adds a deadline and stops every rank on any way out (an error, a timeout, a Jupyter
interrupt); and every rank exits by itself when the launching process dies (``_follow``). A rank blocked
in a collective whose peer died gives up after the process group timeout (30 s).
"""

import contextlib
import datetime
import inspect
import json
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ...devices import usable_gpus

TIMEOUT = datetime.timedelta(seconds=30)

# When a rank fails, newer torch lets the others exit by themselves for a moment before stopping them
# (``ProcessContext.join(grace_period=...)``); older torch, down to the course's floor, stops them at once.
_JOIN_GRACE = {"grace_period": 1.0} if "grace_period" in inspect.signature(mp.ProcessContext.join).parameters else {}


class WorkerError(RuntimeError):
    """A rank failed. ``rank`` is the one that failed first (the cause); ``pids`` are all ranks' processes."""

    def __init__(self, message: str, rank: int, pids: list[int]) -> None:
        super().__init__(message)
        self.rank = rank
        self.pids = pids


def free_port() -> int:
    """A TCP port that is free on 127.0.0.1 now: bind to port 0 and let the OS choose."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def backend_for(world_size: int) -> str:
    """NCCL when every local rank can have a GPU of its own; gloo (CPU) otherwise or with DPCOURSE_DEVICES=cpu."""
    return "nccl" if usable_gpus() >= world_size else "gloo"


def device() -> torch.device:
    """This rank's device: ``cuda:LOCAL_RANK`` under NCCL, else the CPU."""
    if dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _loopback_interface() -> str | None:
    return next((name for _, name in socket.if_nameindex() if name.startswith("lo")), None)


def init_from_env(backend: str | None = None) -> None:
    """``init_process_group`` from torchrun's environment variables, with a 30 s timeout; CPU cores shared.

    When ``MASTER_ADDR`` is a loopback address, gloo is kept on the loopback interface too
    (``GLOO_SOCKET_IFNAME``), so a one-machine run never touches the network.
    """
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ["WORLD_SIZE"]))
    backend = backend or backend_for(local_world)
    if os.environ.get("MASTER_ADDR") in ("127.0.0.1", "localhost") and _loopback_interface():
        os.environ.setdefault("GLOO_SOCKET_IFNAME", _loopback_interface())
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if "OMP_NUM_THREADS" not in os.environ:  # torchrun sets it to 1
        # Ranks on one machine share its cores: each using all of them would oversubscribe them.
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group(backend, timeout=TIMEOUT)


def _start_method(worker: Callable[..., Any]) -> str:
    """``forkserver`` where the OS has it (Linux, macOS), ``spawn`` elsewhere.

    ``spawn`` starts a fresh interpreter per rank, which imports torch again: 2-3 s each, every launch.
    ``forkserver`` starts one fresh server process the first time, which imports torch, dpcourse and
    ``torch._dynamo`` (DDP's constructor imports it: 1.5 s), then forks each rank from that clean,
    single-threaded process in milliseconds. The server lives as long as this process or a rank does.
    When the first worker is one of Part III's (``dpcourse.sharded``), the server also imports its module,
    with FSDP2, DTensor and distributed checkpoints: about a second per rank at every launch otherwise.
    """
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return "spawn"
    preload = ["dpcourse.ddp", "torch._dynamo"]
    if worker.__module__.startswith("dpcourse.sharded"):
        preload.append(worker.__module__)
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
    return "forkserver"


def _follow(launcher: Connection) -> None:
    """Exit as soon as the launching process is gone, e.g. a notebook kernel that was killed.

    Its end of the pipe is then closed, so ``recv_bytes`` raises ``EOFError``. torch's own guard, a SIGINT
    when the parent dies, does not reach a rank started by a forkserver (the server outlives the launcher
    as long as a rank lives), nor a rank blocked in a collective (Python handles signals between bytecodes).
    """

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            launcher.recv_bytes()
        os._exit(1)

    threading.Thread(target=watch, name="follow-launcher", daemon=True).start()


def _run_rank(rank: int, worker: Callable, args: tuple, world_size: int, port: int, backend: str, out: str,
              launcher: Connection) -> None:
    """What each rank's process runs. Exceptions go on to torch's ``_wrap``, which records the traceback."""
    _follow(launcher)
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    try:
        init_from_env(backend)
        result = worker(*args)
        dist.barrier()  # nobody tears down the group (rank 0 hosts the store) while another still uses it
        torch.save(result, Path(out, f"rank-{rank}.pt"))
        dist.destroy_process_group()
    except Exception:
        # The first rank to raise is the cause: the others' collectives fail after it, when it exits.
        note = {"time": time.time(), "traceback": traceback.format_exc()}
        Path(out, f"rank-{rank}.json").write_text(json.dumps(note))
        raise


def _explain(reported: int, processes: Sequence[Any], out: Path) -> WorkerError:
    """One error naming the rank that failed first, with its traceback; later failures are listed after it.

    A rank killed by a signal (other than the SIGTERM with which the others are stopped) failed first:
    the others' collectives fail only after it is gone. Otherwise the cause is the rank that raised first.
    """
    raised = [(rank, json.loads(Path(out, f"rank-{rank}.json").read_text())) for rank in range(len(processes))
              if Path(out, f"rank-{rank}.json").exists()]
    raised.sort(key=lambda item: item[1]["time"])
    raised_ranks = {rank for rank, _ in raised}
    died = [rank for rank, p in enumerate(processes)
            if p.exitcode not in (0, None, -signal.SIGTERM) and rank not in raised_ranks]
    cause = died[0] if died else raised[0][0] if raised else reported
    if cause in raised_ranks:
        message = f"DDP worker rank {cause} (pid {processes[cause].pid}) raised:\n\n{raised[0][1]['traceback']}"
    else:
        code = processes[cause].exitcode
        how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
        message = f"DDP worker rank {cause} (pid {processes[cause].pid}) {how}."
        if code > 0:
            message += " Its stderr says why; a worker defined in a notebook or __main__ cannot be imported there."
    for rank, note in raised:
        if rank != cause:
            message += f"\nThen rank {rank} failed too: {note['traceback'].strip().splitlines()[-1]}"
    return WorkerError(message, cause, [p.pid for p in processes])


def _check_importable(worker: Callable[..., Any]) -> None:
    """Raise ``TypeError`` now if the ranks could not import ``worker``, rather than a pickling error later.

    The worker travels to each rank as its module and name. A lambda or a nested function has no such name;
    one defined in a notebook cell has one only in the notebook's ``__main__``, which a rank cannot import.
    """
    problem = None
    try:
        pickle.dumps(worker)
    except (pickle.PicklingError, AttributeError, TypeError) as error:
        problem = str(error)
    module = getattr(worker, "__module__", None)
    if problem is None and module == "__main__" and not hasattr(sys.modules.get(module), "__file__"):
        problem = "it was defined in a notebook or an interactive session"
    if problem:
        raise TypeError(
            f"The DDP worker {worker!r} cannot be sent to the new processes ({problem}). A worker must be "
            "importable: a function defined at module level in a .py file (like those in dpcourse.ddp), "
            "not a lambda, a nested function or a function defined in a notebook cell."
        )


def _stop(processes: Sequence[Any]) -> None:
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(2)
        if process.is_alive():
            process.kill()
            process.join()


def launch(
    worker: Callable[..., Any],
    world_size: int = 2,
    args: Sequence[Any] = (),
    backend: str | None = None,
    timeout: float = 120.0,
) -> list[Any]:
    """Run ``worker(*args)`` in ``world_size`` new processes, one per rank; return their results, by rank.

    ``worker`` must be importable (a module-level function): spawned processes import it by name.
    Inside it the process group is ready: ``dist.get_rank()``, ``dist.all_reduce``, DDP all work.
    Results travel back through files (``torch.save``), so tensors, numbers, lists and dicts are fine.

    Raises ``TypeError`` before starting anything if ``worker`` is not importable (a lambda, say),
    ``WorkerError`` naming the rank that failed, with its traceback, and ``TimeoutError`` if the
    ranks are not done after ``timeout`` seconds. Either way, no process is left running.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size is the number of processes to start, a whole number >= 1; got {world_size!r}.")
    _check_importable(worker)
    backend = backend or backend_for(world_size)
    method = _start_method(worker)
    ranks_end, launcher_end = multiprocessing.get_context(method).Pipe(duplex=False)  # ranks read; EOF: we died
    with tempfile.TemporaryDirectory(prefix="dpcourse-ddp-") as out, ranks_end, launcher_end:
        spawn_args = (worker, tuple(args), world_size, free_port(), backend, out, ranks_end)
        context = mp.start_processes(_run_rank, spawn_args, nprocs=world_size, join=False, start_method=method)
        deadline = time.monotonic() + timeout
        try:
            while not context.join(timeout=max(0.0, deadline - time.monotonic()), **_JOIN_GRACE):
                if time.monotonic() >= deadline:
                    running = [rank for rank, p in enumerate(context.processes) if p.is_alive()]
                    raise TimeoutError(
                        f"DDP ranks {running} were still running after {timeout:g} s; all ranks were stopped. "
                        f"Pass a larger timeout= if the work really takes that long."
                    )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            raise _explain(error.error_index, context.processes, Path(out)) from None
        finally:
            _stop(context.processes)
        return [torch.load(Path(out, f"rank-{rank}.pt")) for rank in range(world_size)]
