"""Start one process per rank, from a notebook cell or a script, and bring each rank's result back.

``launch(worker, world_size)`` does on one machine what ``torchrun`` does, with ``torch.multiprocessing``:

1. pick a free port on 127.0.0.1 for the rendezvous (rank 0 hosts a ``TCPStore`` there);
2. start ``world_size`` processes, never by plain ``fork`` (a forked child inherits the parent's threads
   and CUDA state, which breaks it). The worker is sent by name, so it must be importable: a function
   defined in a notebook cell is not, so it travels as its source instead (``by_source``);
3. in each: set the environment variables torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
   ``MASTER_ADDR``, ``MASTER_PORT``), call ``init_from_env()``, run ``worker(*args)``, save its result;
4. wait for all of them, with a deadline; on the first failure stop the others and raise ``RankError``.

The environment is the same as under torchrun, so a worker runs unchanged there (``dpcourse.scripts.train_ddp``).

Every way a rank can end is told apart (``_how_it_ended``): it raised (the exception, its traceback, and what
the rank was doing: joining the group, running the function, waiting in the last barrier), it called
``exit()``, it was interrupted, it was killed by a signal, it exited with a code of its own, it died before
it could rebuild what it was sent, or it ended with code 0 and no result. The rank that failed first is the cause.

Deadlines: the process group's own timeout is set 30 s beyond ``launch``'s, so when ranks wait for each other
forever (one skipped a collective another called), ``launch``'s ``TimeoutError`` comes first and says which rank
waited in which collective (``waiting``), not gloo's "Timed out waiting 30000ms".

No orphans: ``ProcessContext.join`` (``torch/multiprocessing/spawn.py``) stops the other ranks when one
fails; ``launch`` adds a deadline and stops every rank on any way out (an error, a timeout, a Jupyter
interrupt); and every rank exits by itself when the launching process dies (``_follow``).
"""

import contextlib
import datetime
import inspect
import json
import logging
import math
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

from ..devices import usable_gpus
from . import waiting

TIMEOUT = datetime.timedelta(seconds=30)  # the process group's, for a script under torchrun
GROUP_MARGIN = 30.0  # seconds the process group's timeout exceeds launch's, so that launch's deadline comes first

# When a rank fails, newer torch lets the others exit by themselves for a moment before stopping them
# (``ProcessContext.join(grace_period=...)``); older torch, down to the course's floor, stops them at once.
_JOIN_GRACE = {"grace_period": 1.0} if "grace_period" in inspect.signature(mp.ProcessContext.join).parameters else {}


class RankError(RuntimeError):
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


def init_from_env(backend: str | None = None, timeout: datetime.timedelta = TIMEOUT) -> None:
    """``init_process_group`` from torchrun's environment variables, with ``timeout`` (30 s); CPU cores shared.

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
    dist.init_process_group(backend, timeout=timeout)


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
              launcher: Connection, group_timeout: datetime.timedelta) -> None:
    """What each rank's process runs. Its result, or how it ended, goes to files in ``out`` for ``_explain``."""
    _follow(launcher)
    out_dir = Path(out)
    (out_dir / f"rank-{rank}.started").touch()  # its arguments were rebuilt in this process
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
    )
    stage = f"joining the process group on 127.0.0.1:{port}"
    try:
        init_from_env(backend, group_timeout)
        stage = f"running {getattr(worker, '__name__', worker)}"
        with waiting.noted(out_dir / f"rank-{rank}.waiting"):
            result = worker(*args)
        waiting.mark_returned(out_dir / f"rank-{rank}.waiting")
        stage = "waiting in the last barrier for the other ranks"
        dist.barrier()  # nobody tears down the group (rank 0 hosts the store) while another still uses it
        torch.save(result, out_dir / f"rank-{rank}.pt")
        dist.destroy_process_group()
    except BaseException as error:  # SystemExit and KeyboardInterrupt too: torch's _wrap ends those with code 0
        note = {"time": time.time(), "traceback": traceback.format_exc(), "stage": stage,
                "kind": type(error).__name__, "exception": f"{type(error).__name__}: {error}".rstrip(": ")}
        (out_dir / f"rank-{rank}.json").write_text(json.dumps(note))
        raise


def _how_it_ended(rank: int, process: Any, out: Path) -> str | None:
    """Why ``rank`` failed, in a sentence, or ``None`` if it did not fail by itself (it succeeded, still runs, or
    was stopped by the launcher with SIGTERM)."""
    who = f"rank {rank} (pid {process.pid}"
    code = process.exitcode
    note_file = out / f"rank-{rank}.json"
    if note_file.exists():
        note = json.loads(note_file.read_text())
        if note["kind"] == "SystemExit":
            return (f"{who}, exit code {code}) called exit() or sys.exit() while {note['stage']}, so it returned no "
                    f"result:\n\n{note['traceback']}")
        if note["kind"] == "KeyboardInterrupt":
            return f"{who}, exit code {code}) was interrupted (KeyboardInterrupt) while {note['stage']}."
        return f"{who}, exit code {code}) raised {note['exception']} while {note['stage']}:\n\n{note['traceback']}"
    if code is None or code == -signal.SIGTERM or (out / f"rank-{rank}.pt").exists():
        return None
    if code < 0:
        return f"{who}) was killed by {signal.Signals(-code).name}."
    if not (out / f"rank-{rank}.started").exists():
        return (f"{who}) exited with code {code} before it started: it could not rebuild the function or arguments "
                "it was sent (its stderr, above, says why). A rank can import only what a .py file defines, "
                "not a class or function defined in a notebook cell.")
    if code == 0:
        return (f"{who}) ended with exit code 0 without returning a result: did it call os._exit(0), or exit() "
                "outside Python's reach?")
    return f"{who}) exited with code {code} without raising an exception (os._exit({code}), or a crash in C code)."


def _explain(processes: Sequence[Any], out: Path) -> RankError:
    """One error naming the rank that failed first, how it ended and why; later failures are listed after it.

    A rank killed by a signal (other than the SIGTERM with which the others are stopped), or one that left
    without a result and without raising, failed first: the others' collectives fail only after it is gone.
    Otherwise the cause is the rank that raised first.
    """
    failed = {rank: how for rank, p in enumerate(processes) if (how := _how_it_ended(rank, p, out))}
    notes = {rank: json.loads((out / f"rank-{rank}.json").read_text()) for rank in failed
             if (out / f"rank-{rank}.json").exists()}
    raised = sorted((note["time"], rank) for rank, note in notes.items()
                    if note["kind"] not in ("SystemExit", "KeyboardInterrupt"))
    left = [rank for rank in failed if rank not in {r for _, r in raised}]
    order = left + [rank for _, rank in raised]
    cause = order[0]
    message = failed[cause].rstrip()
    for rank in order[1:]:
        message += f"\nThen rank {rank} failed too: {failed[rank].splitlines()[0].rstrip(':')}"
    return RankError(message, cause, [p.pid for p in processes])


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
            f"The function {worker!r} cannot be sent to the ranks ({problem}). A rank imports the function it runs: "
            "it must be defined at module level in a .py file (like those in dpcourse.ddp), not a lambda, a nested "
            "function or a function defined in a notebook cell (dpcourse.ranks.SourceFunction sends one of those "
            "as its source)."
        )


def checked_timeout(timeout: Any) -> float | None:
    """``timeout`` as a number of seconds, or ``None`` (no deadline); ``ValueError`` for anything else."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout) \
            or timeout <= 0:
        raise ValueError(f"timeout is the number of seconds to wait for the ranks, a finite number > 0, or None "
                         f"to wait as long as they run; got {timeout!r}.")
    return float(timeout)


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
    timeout: float | None = 120.0,
) -> list[Any]:
    """Run ``worker(*args)`` in ``world_size`` new processes, one per rank; return their results, by rank.

    ``worker`` must be importable (a module-level function): the new processes import it by name.
    Inside it the process group is ready: ``dist.get_rank()``, ``dist.all_reduce``, DDP all work.
    Results travel back through files (``torch.save``), so tensors, numbers, lists and dicts are fine.
    ``timeout``: seconds, a finite number > 0, or ``None`` for no deadline.

    Raises ``ValueError`` for a bad ``world_size`` or ``timeout`` and ``TypeError`` if ``worker`` is not
    importable (a lambda, say), both before starting anything; ``RankError`` naming the rank that failed first
    and how; and ``TimeoutError``, saying where each rank waited, if the ranks are not done after ``timeout``
    seconds. Either way, no process is left running.
    """
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size is the number of processes to start, a whole number >= 1; got {world_size!r}.")
    timeout = checked_timeout(timeout)
    _check_importable(worker)
    backend = backend or backend_for(world_size)
    group_timeout = datetime.timedelta(seconds=timeout + GROUP_MARGIN) if timeout else dist.default_pg_timeout
    method = _start_method(worker)
    ranks_end, launcher_end = multiprocessing.get_context(method).Pipe(duplex=False)  # ranks read; EOF: we died
    spawn_log = logging.getLogger("torch.multiprocessing.spawn")  # "Terminating process N via signal SIGTERM"
    with tempfile.TemporaryDirectory(prefix="dpcourse-ranks-") as out, ranks_end, launcher_end, \
            _quiet(spawn_log):
        spawn_args = (worker, tuple(args), world_size, free_port(), backend, out, ranks_end, group_timeout)
        context = mp.start_processes(_run_rank, spawn_args, nprocs=world_size, join=False, start_method=method)
        deadline = time.monotonic() + timeout if timeout else math.inf
        try:
            while not context.join(timeout=None if timeout is None else max(0.0, deadline - time.monotonic()),
                                   **_JOIN_GRACE):
                if time.monotonic() >= deadline:
                    running = [rank for rank, p in enumerate(context.processes) if p.is_alive()]
                    states = {rank: waiting.read(Path(out, f"rank-{rank}.waiting")) for rank in running}
                    raise TimeoutError(f"ranks {running} were still running after {timeout:g} s and were "
                                       f"stopped: {waiting.explain(states)}")
        except (mp.ProcessRaisedException, mp.ProcessExitedException):
            raise _explain(context.processes, Path(out)) from None
        finally:
            _stop(context.processes)
        if not all(Path(out, f"rank-{rank}.pt").exists() for rank in range(world_size)):
            raise _explain(context.processes, Path(out))
        return [torch.load(Path(out, f"rank-{rank}.pt")) for rank in range(world_size)]


@contextlib.contextmanager
def _quiet(logger: logging.Logger):
    """Only the logger's errors inside the block: torch logs each rank it stops, which the RankError says better."""
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
