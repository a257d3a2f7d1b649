"""The tools that find a hung rank, as a rank uses them: DETAIL's check, the stacks, the Flight Recorder.

    with debug_level("DETAIL"):             # groups made inside are checked before every collective
        group = dist.new_group(timeout=...)
    with stacks(after=1.0) as dumped:       # every thread's Python stack, 1 s in, if still running
        ...
    flight_record()                         # the collectives this process called, per group: [(op, shape)]
    key_phrase(str(error))                  # what an error says, without its ports, paths and addresses
"""

import contextlib
import faulthandler
import linecache
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Iterator

import torch.distributed as dist
from torch._C import _distributed_c10d

_SOURCE_PLACE = re.compile(r"^\[[^\]]*\.(cc|cpp|h):\d+\] ")  # gloo's "[.../unbound_buffer.cc:78] "
_ADDRESS = re.compile(r"\s*\[?\d+\.\d+\.\d+\.\d+\]?:\d+")
_FINGERPRINT = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint\(SequenceNumber=(\d+), "
                          r"OpType=(\w+), TensorShape=(\[[\d, ]*\])")


def key_phrase(message: str) -> str:
    """The part of a torch.distributed error that is the same on every run and machine.

    Gloo's messages start with the C++ file and line that raised and carry the peer's address and port; DETAIL's
    mismatch repeats each rank's fingerprint with every tensor option. Kept: the first sentence, and for a
    mismatch each rank's sequence number, OpType and shape.
    """
    first = _SOURCE_PLACE.sub("", message.strip().splitlines()[0] if message.strip() else "")
    if first.startswith("Detected mismatch between collectives"):
        prints = [f"rank {rank}: #{seq} {op} {shape}" for rank, seq, op, shape in _FINGERPRINT.findall(message)]
        return "Detected mismatch between collectives on ranks (" + "; ".join(prints) + ")"
    first = _ADDRESS.sub("", first)
    return first.split(". ")[0].rstrip(".")


@contextlib.contextmanager
def debug_level(level: str) -> Iterator[None]:
    """Inside the block, ``TORCH_DISTRIBUTED_DEBUG`` is ``level`` ("OFF", "INFO" or "DETAIL") for this process.

    torch reads the variable once, when ``torch.distributed`` is imported (``torch/distributed/__init__.py``
    calls ``set_debug_level_from_env()``), and a group made while it is DETAIL is wrapped in a checking one
    (``torch/distributed/distributed_c10d.py: _new_process_group_helper``). Under torchrun, set it in the shell.
    The course's ranks are forked from a server that imported torch already: the variable set in a rank is not
    seen until it is read again, which this does.
    """
    if level not in ("OFF", "INFO", "DETAIL"):
        raise ValueError(f"TORCH_DISTRIBUTED_DEBUG is OFF, INFO or DETAIL; got {level!r}.")
    before = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = level
    dist.set_debug_level_from_env()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TORCH_DISTRIBUTED_DEBUG"]
        else:
            os.environ["TORCH_DISTRIBUTED_DEBUG"] = before
        dist.set_debug_level_from_env()


def flight_record() -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    """What torch's Flight Recorder logged in this process: per group name, ``(op, shape, state)`` per collective.

    The recorder is one per process (``torch/csrc/distributed/c10d/FlightRecorder.hpp``), on by default with 2000
    entries (``TORCH_FR_BUFFER_SIZE``); gloo's collectives are logged too. ``_dump_fr_trace`` returns the pickled
    entries: ``profiling_name`` ("gloo:all_reduce"), ``input_sizes``, ``state`` ("scheduled", "started",
    "completed"), the group's name, and more.
    """
    trace = pickle.loads(_distributed_c10d._dump_fr_trace(True, False, False))
    records: dict[str, list[tuple[str, tuple[int, ...], str]]] = {}
    for entry in trace.get("entries", []):
        op = entry["profiling_name"].split(":")[-1]
        shape = tuple(entry["input_sizes"][0]) if entry["input_sizes"] else ()
        records.setdefault(entry["process_group"][0], []).append((op, shape, entry["state"]))
    return records


RECORDER_VARIABLES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # the Flight Recorder's size, read once
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-f]+)")
_FRAME = re.compile(r'^\s+File "([^"]+)", line (\d+) in (\S+)')


def _parse(dump: str) -> dict[int, list[str]]:
    """faulthandler's text, per thread ident: ``"file:function: source line"`` per frame, innermost first."""
    threads: dict[int, list[str]] = {}
    frames: list[str] = []
    for line in dump.splitlines():
        if thread := _THREAD.match(line):
            frames = threads.setdefault(int(thread.group(1), 16), [])
        elif frame := _FRAME.match(line):
            path, number, function = frame.groups()
            source = linecache.getline(path, int(number)).strip()
            frames.append(f"{os.path.basename(path)}:{function}: {source}")
    return threads


@contextlib.contextmanager
def stderr_to(path: str) -> Iterator[None]:
    """Inside the block, this process's file descriptor 2 writes to ``path`` (appending): what torch's C++ code
    logs (gloo's "terminate called after throwing", DETAIL's "[E... ProcessGroupGloo.cpp:...]" lines) lands there
    rather than in the notebook's output, with times and ports in it. Kept even if the process is aborted."""
    sys.stderr.flush()
    saved = os.dup(2)
    with open(path, "a") as file:
        os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


@contextlib.contextmanager
def stacks(after: float | None) -> Iterator[dict[int, list[str]]]:
    """Inside the block, if it still runs ``after`` seconds in, every thread's Python stack is written down
    (``faulthandler.dump_traceback_later``, from a C thread: it works while the Python threads are blocked inside
    a collective). The dict it yields is filled when the block ends, per thread ident. ``None``: no dump."""
    dumped: dict[int, list[str]] = {}
    if after is None:
        yield dumped
        return
    with tempfile.TemporaryFile("w+") as file:
        faulthandler.dump_traceback_later(after, file=file)
        try:
            yield dumped
        finally:
            faulthandler.cancel_dump_traceback_later()
            file.seek(0)
            dumped.update(_parse(file.read()))
