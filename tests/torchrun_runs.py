"""Run a script under torchrun for a test, once more if a rank crashed in torch's teardown after finishing.

Both torchrun tests (tests/test_ddp.py, tests/test_ddp_practice.py) failed three times in the full suite
runs of two sessions, and never in 90 runs of the same commands alone (4 at once, beside CPU burners, or all
on one core): every
rank had done and printed all of its work, then one aborted at exit with "terminate called without an
active exception" (a C++ ``std::thread`` destroyed unjoined: torch's and gloo's teardown, not ours). Ranks
that ``dpcourse.ddp.launch`` starts never hit it: multiprocessing ends them with ``os._exit``, which skips
that teardown. pytorch/pytorch#179291 is the same family: gloo threads at interpreter finalization.

So a run that printed everything it should and then failed with exactly that abort is run once more, with a
warning in the test report. Any other failure, or the abort before the work was done, fails the test at once.
``PYTHONFAULTHANDLER`` makes an aborting rank print every Python thread's stack, to say where it was.
"""

import os
import warnings
from collections.abc import Callable
from subprocess import CompletedProcess
from unittest import mock

from dpcourse.ranks.torchrun import torchrun

TEARDOWN_ABORT = "terminate called without an active exception"


def crashed_after_finishing(ran: CompletedProcess, finished: Callable[[str], bool]) -> bool:
    """True if the run failed only by a rank's abort at teardown: ``finished(stdout)`` holds, and that abort."""
    return ran.returncode != 0 and finished(ran.stdout) and TEARDOWN_ABORT in ran.stderr


def run_torchrun(module: str, args: list[str], finished: Callable[[str], bool], timeout: float = 120.0
                 ) -> CompletedProcess:
    """``torchrun(module, args)`` on 2 ranks; once more if it ``crashed_after_finishing`` (warned)."""
    with mock.patch.dict(os.environ, {"PYTHONFAULTHANDLER": "1"}):
        ran = torchrun(module, args, nproc=2, timeout=timeout)
        if crashed_after_finishing(ran, finished):
            warnings.warn(f"torchrun -m {module}: a rank aborted at exit after finishing its work; ran it "
                          f"again. Its stderr:\n{ran.stderr[-3000:]}", stacklevel=2)
            ran = torchrun(module, args, nproc=2, timeout=timeout)
    return ran
