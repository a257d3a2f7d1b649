"""Interleaved rounds on a shared machine: the cores other processes kept busy in each round, and the report.

``dpcourse.timing.interleaved`` runs the variants in turns and pairs their times per round. Drift does not
cancel when the variants use the cores differently (a 2-thread step loses half its speed when another process
takes one core, a 1-thread step much less), so the benchmarks also record, per round, how many cores *other*
processes kept busy (all CPU time in /proc/stat minus this process's own and its waited-for children's), and
report every result over all rounds and again over the quiet ones.
"""

import contextlib
import dataclasses
import os
import resource
import statistics
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from dpcourse.timing import Rounds, Sample, interleaved

QUIET_CORES = 0.25  # a round is quiet when other processes used less than this many cores on average
PROC_STAT = Path("/proc/stat")


def others_cpu_seconds() -> float:
    """CPU seconds used on this machine so far by everything but this process and the children it waited for.

    0.0 where there is no /proc/stat (not Linux): every round then counts as quiet.
    """
    if not PROC_STAT.exists():
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, PROC_STAT.read_text().split()[1:9])
    own = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK") - sum(
        usage.ru_utime + usage.ru_stime for usage in own)


@contextlib.contextmanager
def others_cores(into: list[float]) -> Iterator[None]:
    """Append to ``into`` the cores other processes kept busy, on average, while the block ran."""
    start, others = time.perf_counter(), others_cpu_seconds()
    yield
    into.append((others_cpu_seconds() - others) / (time.perf_counter() - start))


def summary(seconds: list[float]) -> dict[str, float]:
    """Median, quartiles and extremes of ``seconds``, in milliseconds; ``spread`` is (q3 - q1) / median."""
    ms = sorted(s * 1e3 for s in seconds)
    q1, median, q3 = statistics.quantiles(ms, n=4, method="inclusive") if len(ms) > 1 else (ms[0],) * 3
    return {"n": len(ms), "median_ms": median, "q1_ms": q1, "q3_ms": q3, "min_ms": ms[0], "max_ms": ms[-1],
            "spread": (q3 - q1) / median if median else 0.0}


@dataclasses.dataclass
class Watched:
    """Rounds, and the cores other processes used in each."""

    rounds: Rounds
    others: list[float]

    @property
    def samples(self) -> dict[str, list[float]]:
        return self.rounds.samples

    def quiet(self) -> "Watched":
        keep = [i for i, cores in enumerate(self.others) if cores < QUIET_CORES]
        samples = {name: [seconds[i] for i in keep] for name, seconds in self.samples.items()}
        return Watched(Rounds(samples), [self.others[i] for i in keep])

    def report(self, baseline: str, ratio_key: str) -> dict:
        """Summaries and ratios to ``baseline`` over all rounds, and the same over the quiet rounds (if 3+)."""
        quiet = self.quiet()
        result = {
            "steps": {name: summary(seconds) for name, seconds in self.samples.items()},
            ratio_key: {name: self.rounds.ratio(name, baseline) for name in self.samples if name != baseline},
            "others_cores": {"median": statistics.median(self.others), "max": max(self.others)},
            "quiet_rounds": len(quiet.others),
        }
        if len(quiet.others) >= 3:
            result["quiet"] = {
                "steps": {name: summary(seconds) for name, seconds in quiet.samples.items()},
                ratio_key: {name: quiet.rounds.ratio(name, baseline) for name in quiet.samples if name != baseline},
            }
        return result


def watched(variants: Mapping[str, Sample], rounds: int, warmup: int) -> Watched:
    """``timing.interleaved``, with the cores other processes used in each kept round."""
    others: list[float] = []
    measured = interleaved(variants, rounds, warmup, around_round=lambda: others_cores(others))
    return Watched(measured, others)
