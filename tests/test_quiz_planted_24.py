"""Lesson 24's quiz experiments, each run in a planted world where a wrong answer is true; the experiment must
then measure that wrong answer (``tests/quiz_planting.py``).

One real story (two starts of 2 ranks) is run once; each plant changes a copy of what it recorded, or the
restarting launcher, where the experiment reads it.
"""

import copy

import pytest

from dpcourse.faults import resume_runs
from dpcourse.faults.restarts import Attempt
from dpcourse.quiz.experiments import lesson24
from tests.quiz_planting import planted, reports


@pytest.fixture(scope="module")
def story(tmp_path_factory):
    return resume_runs.story(str(tmp_path_factory.mktemp("story")))


def _planted_story(monkeypatch, story):
    planted_story = copy.deepcopy(story)
    monkeypatch.setattr(lesson24, "_story", lambda: planted_story)
    return planted_story


@planted("24-forget-generators")
def test_generators_that_did_not_matter_would_give_bit_identical_weights(monkeypatch, story):
    planted_story = _planted_story(monkeypatch, story)
    planted_story.lanes[0]["without the generators"]["parameters"] = planted_story.uninterrupted[0]["parameters"]
    reports("24-forget-generators", lesson24.BIT_IDENTICAL)


@planted("24-forget-generators")
def test_generators_that_decided_a_little_noise_would_be_within_1e_6(monkeypatch, story):
    planted_story = _planted_story(monkeypatch, story)
    planted_story.lanes[0]["without the generators"]["parameters"] = [
        p + 1e-7 for p in planted_story.uninterrupted[0]["parameters"]]
    reports("24-forget-generators", lesson24.CLOSE)


@planted("24-rank-dies")
def test_a_launcher_that_restarted_only_the_dead_rank_would_be_measured(monkeypatch, story):
    planted_story = _planted_story(monkeypatch, story)
    planted_story.lanes[0]["resumed"]["pid"] = planted_story.attempts[0].pids[0]
    reports("24-rank-dies", "Only rank 1 is started again; it rejoins rank 0 where rank 0 is")


@planted("24-rank-dies")
def test_a_rank_0_that_trained_on_would_be_measured(monkeypatch, story):
    planted_story = _planted_story(monkeypatch, story)
    log = planted_story.log
    monkeypatch.setattr(planted_story, "log", lambda lane, attempt, rank: log(lane, attempt, rank) + (
        [{"step": 16}] if (lane, attempt, rank) == ("interrupted", 0, 0) else []))
    reports("24-rank-dies", "Rank 0 trains on to step 16; only rank 1's work is lost")


@planted("24-out-of-restarts")
def test_restarts_counted_as_attempts_would_fail_at_once(monkeypatch):
    monkeypatch.setattr(resume_runs, "dies_every_attempt", lambda max_restarts: [
        Attempt(0, failure="rank 1 (pid 1) was killed by SIGKILL.", failed_rank=1)])
    reports("24-out-of-restarts", "It fails at once: --max-restarts 1 means 1 attempt in all")


@planted("24-out-of-restarts")
def test_a_group_that_went_on_without_a_rank_would_finish(monkeypatch):
    monkeypatch.setattr(resume_runs, "dies_every_attempt", lambda max_restarts: [
        Attempt(0, failure="rank 1 (pid 1) was killed by SIGKILL.", failed_rank=1), Attempt(1, results=[None])])
    reports("24-out-of-restarts", "It finishes with rank 0 alone")


@planted("24-epoch-from-start")
def test_a_sampler_whose_epoch_order_differed_would_show_no_sample_twice(monkeypatch, story):
    _planted_story(monkeypatch, story)
    monkeypatch.setattr(resume_runs, "trained_twice", lambda story, lane, rank: [])
    reports("24-epoch-from-start", "Every rank trains on another rank's samples")


@planted("24-epoch-from-start")
def test_a_resume_that_skipped_by_itself_would_change_nothing(monkeypatch, story):
    planted_story = _planted_story(monkeypatch, story)
    planted_story.lanes[0]["without the position"]["parameters"] = planted_story.uninterrupted[0]["parameters"]
    monkeypatch.setattr(resume_runs, "trained_twice", lambda story, lane, rank: [])
    reports("24-epoch-from-start", "Nothing: set_epoch(1) gives the same order, so the run ends with the same weights")
