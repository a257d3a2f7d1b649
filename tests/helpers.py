"""What several test files share: fixed traces for the timeline figures, and a parallel_apply-like runner.

Test files import these from here, never from each other.
"""

import dataclasses
import threading

from dpcourse.trace import STEPS, Span, Trace


def narrow_spans() -> Trace:
    """Every step 7.1% of a 1 s step, back to back: the timing a run gives now and then, where the names of
    neighbouring steps ("reduce-add", "scatter-backward") are wider than their bars."""
    spans, start = [], 0.0
    for step in STEPS:
        per_replica = step in ("forward", "backward")  # forwards in the replica threads, backwards in the main one
        threads = [(f"replica-{r}" if step == "forward" else "MainThread", r) for r in range(2)] if per_replica else [
            ("MainThread", None)]
        spans += [Span(step, start, start + 0.071, thread, replica, "cpu") for thread, replica in threads]
        start += 0.071
    return Trace([*spans, Span("scatter", 0.99, 1.0, "MainThread")])



def scaled(trace: Trace, factor: float) -> Trace:
    return Trace([dataclasses.replace(s, start=s.start * factor, end=s.end * factor) for s in trace.spans])



def one_thread_each(functions, inputs):
    outputs = [None] * len(functions)
    threads = [threading.Thread(target=lambda i=i: outputs.__setitem__(i, functions[i](inputs[i])))
               for i in range(len(functions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outputs
