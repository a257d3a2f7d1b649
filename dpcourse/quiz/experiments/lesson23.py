"""Experiments for lesson 23 (stragglers): each starts 3 real gloo ranks and times them.

Each runs ``faults.stragglers.observe``, the lesson's own run: DDP on the course's model, 150 ms of sleep planted
on rank 2 (in its forward, then in its backward, then in its forward with a probe that gathers every rank's clock),
after steps with no delay; ``faults.straggler_report`` reads the medians and says which claim they support.
``dpcourse.faults`` is imported inside each experiment, when it runs (it loads ``torch.distributed``).
"""

from ..outcome import Outcome, only_true


def _observed() -> tuple[list[dict], int, float]:
    from dpcourse.faults import stragglers

    return stragglers.observe(), stragglers.SLOW_RANK, stragglers.DELAY


def step_times_with_a_straggler() -> Outcome:
    """Each rank's median step without a delay and with 150 ms of sleep in rank 2's forward."""
    from dpcourse.faults import straggler_report

    results, slow_rank, delay = _observed()
    text, claims = straggler_report.steps(results, slow_rank, delay)
    value = only_true({
        "Only rank 2's; ranks 0 and 1 keep their pace": claims["only slow"],
        "Every rank's, by about the delay": claims["every"],
        "Rank 2's by the delay; ranks 0 and 1's by about half of it, the rest hidden behind their own work": claims[
            "part"],
    })
    return Outcome(text, value)


def where_the_wait_goes() -> Outcome:
    """The phases of ranks 0 and 1 (forward, backward, optimizer) that grow when rank 2 sleeps in its forward."""
    from dpcourse.faults import straggler_report

    results, slow_rank, delay = _observed()
    text, grew = straggler_report.phases(results, "forward", slow_rank, delay)
    value = only_true({
        "In their forward: the ranks run each layer in lockstep": grew["forward"],
        "In `loss.backward()`, waiting in DDP's all-reduce for rank 2's gradients": grew["backward"] and grew[
            "waiting"],
        "In `optimizer.step()`: it waits until every rank's gradients are in": grew["optimizer"],
    })
    return Outcome(text, value)


def backward_delay() -> Outcome:
    """Each rank's median ``loss.backward()`` with rank 2's 150 ms sleep at the start of its backward."""
    from dpcourse.faults import straggler_report

    results, slow_rank, delay = _observed()
    text, claims = straggler_report.backwards(results, slow_rank, delay)
    value = only_true({
        "Rank 2's, as before: it arrives last at the all-reduce and waits for no one": claims["slow shortest"],
        "Ranks 0 and 1's: only rank 2's backward holds the sleep": claims["others shortest"],
        "None: every rank's backward takes about the delay": claims["equal"],
    })
    return Outcome(text, value)


def probe_moves_the_wait() -> Outcome:
    """With an ``all_gather_object`` of every rank's clock before ``loss.backward()``: where ranks 0 and 1 wait."""
    from dpcourse.faults import straggler_report

    results, slow_rank, delay = _observed()
    text, claims = straggler_report.probed(results, slow_rank, delay)
    value = only_true({
        "In the all-reduce inside `loss.backward()`, as without the probe": claims["all-reduce"],
        "In the probe's `all_gather_object`, the first collective that rank 2 reaches late": claims["gather"],
        "In both: the wait is paid twice, and every step grows by twice the delay": claims["twice"],
    })
    return Outcome(text, value)


EXPERIMENTS = (step_times_with_a_straggler, where_the_wait_goes, backward_delay, probe_moves_the_wait)
