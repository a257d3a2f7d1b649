"""One exercise's mutation score: the reference solution must pass first, then every mutant runs through the check.

The time limit of a mutant is a multiple of the reference's own check time: a mutant that takes far longer than
the right answer is waiting for something that will not come (a rank in a collective the others never join).
"""

from dpcourse.exercises import EXERCISES

from . import exercises, mutants, report, runner

QUICK_MUTANTS = 12  # per exercise, with --quick: enough to catch a check that lost a whole kind of observation
LIMIT_FACTOR, LIMIT_FLOOR = 3, 20.0  # a mutant's time limit: 3 x the reference's check, at least 20 s


class ReferenceFailed(RuntimeError):
    """The lesson's own solution does not pass its check: the mutants would say nothing."""


def quick_selection(all_mutants: list[mutants.Mutant]) -> list[mutants.Mutant]:
    """At most ``QUICK_MUTANTS``, spread evenly over the solution (the same ones on every run)."""
    step = max(1, -(-len(all_mutants) // QUICK_MUTANTS))
    return all_mutants[::step]


def evaluate(exercise: exercises.Exercise, chosen: list[mutants.Mutant] | None = None, quick: bool = False,
             progress=print) -> dict:
    """The report entry of ``exercise``: its reference checked, then the ``chosen`` mutants (by default all)."""
    if EXERCISES[exercise.name].slow:  # a check that starts ranks (the registry's import: once, here)
        runner.share_forkserver()
    namespace = exercises.namespace(exercise)
    reference = runner.run(exercise, namespace, exercise.solution, "reference", limit=600)
    if reference.outcome != runner.PASSED:
        raise ReferenceFailed(f"{exercise.name}: the lesson's solution does not pass its check "
                              f"({reference.outcome}: {reference.detail}); fix the check or the lesson first.")
    if chosen is None:
        chosen = mutants.of(exercise.solution, exercise.solution_lines)
        chosen = quick_selection(chosen) if quick else chosen
    reviewed = report.equivalent().get(exercise.name, {})
    limit = max(LIMIT_FLOOR, LIMIT_FACTOR * reference.seconds)
    killed, timeouts, survivors, equivalents, stale = 0, 0, [], 0, []
    for number, mutant in enumerate(chosen, start=1):
        outcome = runner.run(exercise, namespace, mutant.source, mutant.id, limit)
        if outcome.outcome != runner.PASSED:
            killed += 1
            timeouts += outcome.outcome == runner.TIMEOUT
            if mutant.id in reviewed:
                stale.append(mutant.id)  # listed as equivalent, yet the check tells it apart: not equivalent
        elif mutant.id in reviewed:
            equivalents += 1
        else:
            survivors.append({"id": mutant.id, "diff": f"L{mutant.line}: {mutant.diff}"})
        progress(f"  {exercise.name} {number}/{len(chosen)} {outcome.outcome:7} {outcome.seconds:5.1f}s "
                 f"{mutant.id}")
    return report.entry(exercise.lesson, len(chosen), killed, timeouts, survivors, equivalents, stale,
                        reference.seconds, limit, quick)
