"""Every way a rank can fail is told to the learner: which rank, how it ended, and why (issue 35's battery).

The cases run on real gloo ranks. Each asserts the message a learner reads: the rank that failed first, its exit
code or signal, the exception with the learner's line where there is one; and that no process is left behind.
"""

import math
import multiprocessing
import socket
import sys
import time
import types

import pytest

from dpcourse import memory, ranks
from dpcourse.ranks import launcher
from tests import rank_failures


def test_a_rank_that_skips_a_collective_gets_the_courses_timeout_naming_where_each_rank_waited():
    start = time.monotonic()
    with pytest.raises(TimeoutError) as info:
        ranks.train_on_ranks(rank_failures.rank_1_skips_the_all_gather, 2, timeout=4)
    message = str(info.value)
    assert "rank 0 was waiting in all_gather (its 1st collective call)" in message
    assert "rank 1: its function had returned; waiting in the last barrier for the others" in message
    assert "every rank must call the same collectives in the same order" in message
    assert "Timed out waiting" not in message  # gloo's own timeout comes 30 s later
    assert time.monotonic() - start < 25
    assert multiprocessing.active_children() == []


def test_a_loop_that_never_ends_is_not_blamed_on_collectives():
    with pytest.raises(TimeoutError, match=r"rank 0 was running its own code, not in a collective .* No rank was "
                                           r"inside a collective"):
        ranks.launch(rank_failures.never_returns, 2, timeout=3)


def test_a_rank_that_calls_exit_is_named_not_the_survivors_gloo_error():
    with pytest.raises(ranks.RankError) as info:
        ranks.train_on_ranks(rank_failures.rank_1_calls_exit, 2, timeout=30)
    message = str(info.value)
    assert info.value.rank == 1
    assert message.startswith("rank 1 (pid ") and "exit code 0) called exit() or sys.exit()" in message
    assert "GLHF" not in message.splitlines()[0]


def test_every_rank_calling_exit_is_an_error_not_a_missing_file():
    with pytest.raises(ranks.RankError, match=r"rank 0 \(pid \d+, exit code 0\) called exit\(\) or sys.exit\(\)"):
        ranks.train_on_ranks(rank_failures.every_rank_calls_exit, 2, timeout=30)


def test_a_rank_interrupted_by_keyboard_interrupt_is_named():
    with pytest.raises(ranks.RankError, match=r"^rank 1 \(pid \d+, exit code 0\) was interrupted \(KeyboardInterrupt"):
        ranks.train_on_ranks(rank_failures.rank_1_interrupted, 2, timeout=30)


@pytest.mark.parametrize(("code", "expected"), [
    (0, r"^rank 1 \(pid \d+\) ended with exit code 0 without returning a result"),
    (3, r"^rank 1 \(pid \d+\) exited with code 3 without raising an exception \(os._exit\(3\)"),
])
def test_a_rank_that_exits_by_os_exit_is_named_with_its_code(code, expected):
    with pytest.raises(ranks.RankError, match=expected) as info:
        ranks.launch(rank_failures.rank_1_os_exit, 2, args=(code,), timeout=30)
    assert "cannot be imported" not in str(info.value)  # the old, wrong hint


def test_a_raising_rank_names_its_exit_code_exception_and_what_it_was_doing():
    from dpcourse import ddp

    with pytest.raises(ranks.RankError) as info:
        ddp.crash("raise", rank=1)
    first = str(info.value).splitlines()[0]
    assert first == (f"rank 1 (pid {info.value.pids[1]}, exit code 1) raised ValueError: rank 1 failed on purpose "
                     "while running _crash:")


def test_a_port_already_taken_names_the_rank_and_the_port(monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(launcher, "free_port", lambda: port)
        with pytest.raises(ranks.RankError, match=rf"while joining the process group on 127.0.0.1:{port}"):
            ranks.launch(rank_failures.returns_rank, 2, timeout=60)


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -5, 0, "10", True])
def test_a_timeout_that_is_not_a_positive_finite_number_is_refused_before_any_rank_starts(timeout):
    for run in (lambda: ranks.launch(rank_failures.returns_rank, 2, timeout=timeout),
                lambda: ranks.train_on_ranks(rank_failures.rank_1_calls_exit, 2, timeout=timeout)):
        with pytest.raises(ValueError, match=r"timeout is the number of seconds .* or None"):
            run()
    assert multiprocessing.active_children() == []


def test_no_timeout_is_accepted():
    assert ranks.launch(rank_failures.returns_rank, 2, timeout=None) == [0, 1]


@pytest.mark.parametrize(("setting", "match"), [
    ({"widths": (8,)}, r"widths are the layer widths"),
    ({"widths": (8, 0, 4)}, r"every width must be a whole number >= 1; got 0"),
    ({"steps": -1}, r"steps must be a whole number >= 1; got -1"),
    ({"samples": -24}, r"samples \(per step, over all ranks\) must be a whole number >= 1"),
    ({"seed": "x"}, r"seed must be a whole number >= 0; got 'x'"),
    ({"lr": math.nan}, r"lr must be a finite number > 0"),
    ({"extra": {"lock": __import__("threading").Lock()}}, r"extra= travels to every rank pickled"),
])
def test_bad_training_settings_are_refused_before_any_rank_starts(setting, match):
    with pytest.raises((ValueError, TypeError), match=match):
        ranks.train_on_ranks(rank_failures.rank_1_calls_exit, 2, **setting)
    assert multiprocessing.active_children() == []


def _notebook(monkeypatch, source: str) -> types.ModuleType:
    """A notebook's ``__main__``: no file a rank could import it from; ``source`` run in it, as cells would."""
    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    exec(compile(source, "<cell>", "exec"), vars(main))
    return main


def test_a_notebook_class_used_by_a_program_is_named_before_any_rank_starts(monkeypatch):
    main = _notebook(monkeypatch, "class ShardError(Exception):\n    pass\n")
    source = "def program(model, batches, lr):\n    raise ShardError('too short')\n"
    program = _source_function(main, source, "program")
    with pytest.raises(TypeError, match=r"program uses 'ShardError', a class defined in this notebook\. A rank "
                                        r"cannot import a notebook.*Define 'ShardError' inside program"):
        ranks.train_on_ranks(program, 2)
    assert multiprocessing.active_children() == []


def test_a_notebook_dataclass_instance_is_named_before_any_rank_starts(monkeypatch):
    main = _notebook(monkeypatch, "import dataclasses\n@dataclasses.dataclass\nclass Config:\n    n: int = 2\n"
                                  "CFG = Config()\n")
    program = _source_function(main, "def program(model, batches, lr):\n    return CFG.n\n", "program")
    with pytest.raises(TypeError, match=r"program uses 'CFG', a Config object, and Config is a class defined in "
                                        r"this notebook"):
        ranks.train_on_ranks(program, 2)


def test_a_class_defined_inside_the_program_travels_with_it(monkeypatch):
    main = _notebook(monkeypatch, "")
    source = ("def program(model, batches, lr):\n    class ShardError(Exception):\n        pass\n"
              "    raise ShardError('too short')\n")
    with pytest.raises(RuntimeError, match=r"ShardError: too short \(rank \d, line 4 of program"):
        ranks.train_on_ranks(_source_function(main, source, "program"), 2, timeout=30)


def _source_function(main: types.ModuleType, source: str, name: str):
    """A function defined in the fake notebook ``main``, whose source ``inspect`` finds as it finds a cell's."""
    import linecache

    filename = f"<cell-{name}-{abs(hash(source))}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), vars(main))
    return vars(main)[name]


@pytest.mark.parametrize("devices", [10**400, 10**9, 100_001])
def test_sizes_too_large_to_compute_are_refused_before_any_work(devices):
    with pytest.raises(ValueError, match=r"devices must be at most 100,000"):
        memory.predict(memory.Setup(kind="ZeRO-3", devices=devices))
