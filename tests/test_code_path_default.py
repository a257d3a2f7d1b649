"""nbval on the instructor edition of every lesson whose outputs hold a float, with torch and MKL on their 'default'
code path (ATEN_CPU_CAPABILITY=default, MKL_ENABLE_INSTRUCTIONS=SSE4_2; tests/cpu_code_paths.py): the stored outputs
must not be this CPU's alone."""

import pytest

from tests.cpu_code_paths import FLOAT_LESSONS, X86, nbval_on_code_path


@pytest.mark.skipif(not X86, reason="the code paths named are x86-64's")
@pytest.mark.parametrize("lesson", FLOAT_LESSONS, ids=[lesson.name for lesson in FLOAT_LESSONS])
def test_stored_outputs_on_the_default_code_path(lesson):
    nbval_on_code_path(lesson, "default")
