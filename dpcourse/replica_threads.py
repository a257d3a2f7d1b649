"""The threads parallel_apply runs replicas on: one per replica position, kept alive between calls.

torch's parallel_apply starts fresh threads on every forward. dpcourse keeps them instead, for two
reasons measured on a 2-core CPU (see docs/benchmarks.md):

* A new thread's first torch operations pay a one-time set-up (its own OpenMP team and allocator state):
  about 1-3 ms, more than a small model's whole forward.
* Each thread would use every core for its own matmuls, so 2 replicas on 2 cores run 4 busy threads that
  fight over them. CPU replicas therefore get an equal share of the intra-op threads (at least one).

Neither changes any result: each replica still runs in its own thread, replica i always on "replica-i".
"""

import queue
import threading
from collections.abc import Callable, Sequence

import torch


class _Worker:
    def __init__(self, index: int) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], None], threading.Event]] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"replica-{index}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        while True:
            job, done = self.jobs.get()
            job()  # a job catches its own exceptions: parallel_apply re-raises them in the caller
            done.set()


_workers: list[_Worker] = []
_lock = threading.Lock()


def _worker(index: int) -> _Worker:
    with _lock:
        while len(_workers) <= index:
            _workers.append(_Worker(len(_workers)))
        if not _workers[index].thread.is_alive():  # a forked child process has none of its parent's threads
            _workers[index] = _Worker(index)
        return _workers[index]


def run_on_replica_threads(jobs: Sequence[Callable[[], None]], on_cpu: Sequence[bool]) -> None:
    """Run ``jobs[i]`` on thread "replica-i", all at once, and wait for all of them.

    Jobs marked ``on_cpu`` share the caller's intra-op threads equally.
    """
    caller_threads = torch.get_num_threads()
    share = max(1, caller_threads // max(1, sum(on_cpu)))

    def with_cpu_share(job: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            if torch.get_num_threads() != share:
                torch.set_num_threads(share)
            job()

        return run

    finished = []
    for i, (job, cpu) in enumerate(zip(jobs, on_cpu, strict=True)):
        done = threading.Event()
        _worker(i).jobs.put((with_cpu_share(job) if cpu else job, done))
        finished.append(done)
    for done in finished:
        done.wait()
    # set_num_threads also sets the default for threads started later; give that back to the caller's.
    torch.set_num_threads(caller_threads)
