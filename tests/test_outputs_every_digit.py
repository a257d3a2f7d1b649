"""No stored output prints a float with every digit: its last bits differ from CPU to CPU (tests/cpu_code_paths.py)."""

import json

import pytest

from dpcourse import course
from tests.cpu_code_paths import EDITIONS, ROOT, floats_with_every_digit


def test_a_loss_printed_with_every_digit_is_found(tmp_path):
    planted = tmp_path / "planted.ipynb"
    cell = {"cell_type": "code", "source": "", "metadata": {}, "execution_count": 1,
            "outputs": [{"output_type": "execute_result", "metadata": {}, "execution_count": 1,
                         "data": {"text/plain": ["[1.3538929224014282,\n", " 1.4702]"]}},
                        {"output_type": "stream", "name": "stdout", "text": ["gap 2.9802322e-08, loss 1.3539\n"]}]}
    planted.write_text(json.dumps({"cells": [cell]}))
    assert floats_with_every_digit(planted) == [(0, "1.3538929224014282"), (0, "2.9802322e-08")]


@pytest.mark.parametrize("lesson", course.LESSONS, ids=[lesson.name for lesson in course.LESSONS])
def test_no_stored_output_prints_a_float_with_every_digit(lesson):
    found = [f"{notebook.relative_to(ROOT)}, cell {index}: {number}"
             for notebook in (edition / f"{lesson.name}.ipynb" for edition in EDITIONS)
             for index, number in floats_with_every_digit(notebook)]
    assert found == [], ("these outputs print a float to its last bits, which differ from CPU to CPU; print it "
                         "rounded (a loss to 4 decimals) or as examples.gap(difference) ('below 1e-6'):\n"
                         + "\n".join(found))

