"""Mutation testing of the exercise checks: does each check reject the plausible wrong answers?

    .venv/bin/python -m tests.mutation            # every exercise: docs/benchmark_results/mutation.json
    .venv/bin/python -m tests.mutation 02 05      # two lessons' exercises
    .venv/bin/python -m tests.mutation --quick    # the in-kernel checks only, a bounded number of mutants each

A check judges what an exercise teaches only if a solution with one mechanical mistake in it fails. So each
checked exercise's reference solution (``exercises``: found in the lesson sources) is changed one mistake at a
time (``mutants``, made by the ``operators``: a comparison flipped, a call dropped, a collective swapped...);
every mutant goes through the exercise's own ``exercises.check`` in a process of its own with a time limit
(``runner``, ``score``); the report (``report``) counts per exercise the mutants killed, those that survived
(each with its one-line diff) and those ``equivalent.toml`` lists as equivalent (reviewed: no check could tell
them from the solution). The score is killed / (total - equivalent); the course's goal is 95 % per exercise.
"""
