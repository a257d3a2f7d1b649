"""Run a script under ``torchrun`` from a notebook cell or a test, with a deadline and no process left behind.

``torchrun --standalone --nproc_per_node=N -m module`` starts an agent process, which starts N workers, each
in a session of its own (``torch/distributed/elastic/multiprocessing/subprocess_handler``). On SIGTERM the
agent normally stops its workers, but not always: a SIGTERM that arrives while it is starting them leaves
them running, re-parented away from us. So every process of the run carries a token in its environment
(workers inherit the agent's), and at the deadline ``torchrun`` sends the agent SIGTERM, then kills whatever
still carries the token. Output goes to files, not pipes: a worker left holding a pipe would keep a reader
waiting for its end forever.
"""

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

GRACE = 10.0  # seconds the agent gets to stop its workers after SIGTERM
TOKEN = "DPCOURSE_TORCHRUN_TOKEN"


def command(module: str, args: list[str], nproc: int = 2) -> list[str]:
    """The torchrun command line, with the ``torchrun`` that belongs to this Python."""
    torchrun = Path(sys.executable).with_name("torchrun")
    launcher = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    return [*launcher, "--standalone", f"--nproc_per_node={nproc}", "-m", module, *args]


def carrying(token: str) -> list[int]:
    """The processes whose environment holds ``TOKEN=token``: those of one run, however deep below it (Linux)."""
    marker = f"{TOKEN}={token}".encode()
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        with contextlib.suppress(OSError):
            if marker in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
    return found


def _stop(agent: subprocess.Popen, token: str) -> None:
    agent.terminate()
    try:
        agent.wait(GRACE)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()
    deadline = time.monotonic() + GRACE
    while (left := carrying(token)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def torchrun(module: str, args: list[str], nproc: int = 2, timeout: float = 120.0) -> subprocess.CompletedProcess:
    """Run ``torchrun --standalone --nproc_per_node=nproc -m module *args``; return its exit code and output.

    Raises ``TimeoutError`` after ``timeout`` seconds, once the agent and every worker are gone; an interrupt
    (Jupyter's stop button) stops them too.
    """
    token = uuid.uuid4().hex
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        agent = subprocess.Popen(command(module, args, nproc), stdout=out, stderr=err, text=True,
                                 env={**os.environ, TOKEN: token})
        try:
            agent.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(agent, token)
            raise TimeoutError(f"torchrun -m {module} was still running after {timeout:g} s; it and its "
                               f"{nproc} workers were stopped. Pass a larger timeout= if the work really takes "
                               "that long.") from None
        except BaseException:
            _stop(agent, token)
            raise
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(agent.args, agent.returncode, out.read(), err.read())
