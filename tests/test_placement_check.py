"""Every lesson and every quiz experiment runs where ``dpcourse.devices(n)`` is ``[cuda:0, ...]``.

CI has no GPU, so these tests put CPU devices in a GPU's place (notebooks/kernel/ipython's startup file): a model left
on the CPU, or a target that meets an output gathered on ``devices[0]``, fails as it would on a GPU. nbval runs
every lesson under the same check (notebooks/conftest.py); here the check itself is shown to catch the mistake
that broke 14 lessons on a GPU machine, and every quiz experiment, which runs only when a learner clicks, is run
under it.
"""

import os

import nbformat
import pytest
from nbclient import NotebookClient

from dpcourse.quiz import EXPERIMENTS
from notebooks.conftest import LESSON_ENVIRONMENT

SETUP = "import dpcourse, torch\nfrom dpcourse import examples\ndevices = dpcourse.devices(2)"
PLANTED = "dpcourse.DataParallel(examples.make_model(), devices=devices)(torch.randn(4, 8))"
PLACED = """model = examples.make_model().to(devices[0])
x, y = examples.make_batch(4, device=devices[0])
examples.loss_fn(dpcourse.DataParallel(model, devices=devices)(x), y).backward()"""
TARGET_LEFT_BEHIND = """x, y = examples.make_batch(4)
examples.loss_fn(dpcourse.DataParallel(model, devices=devices)(x), y)"""


def _run_cells(*sources: str) -> list[list[dict]]:
    """Run ``sources`` as the cells of one notebook in a lesson's kernel; each cell's outputs."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    assert os.environ["IPYTHONDIR"] == LESSON_ENVIRONMENT["IPYTHONDIR"]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return [cell.outputs for cell in notebook.cells]


def _error(outputs: list[dict]) -> str:
    return "\n".join(f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error")


def test_a_lesson_kernel_fails_a_model_left_on_the_cpu_and_passes_the_idiom():
    setup, planted, placed, target = _run_cells(SETUP, PLANTED, PLACED, TARGET_LEFT_BEHIND)
    assert not _error(setup)
    assert "placement check" in _error(planted) and "0.weight was never moved to devices[0]" in _error(planted)
    assert not _error(placed)
    assert "placement check" in _error(target) and "cross_entropy" in _error(target)


def test_the_check_asks_for_what_devices_chose_not_for_the_real_cpu(stand_in_gpu):
    import dpcourse
    from dpcourse import examples

    x = torch_randn(4, 8)
    dpcourse.DataParallel(examples.make_model(), devices=["cpu", "cpu"])(x)  # the CPU itself, on any machine
    with pytest.raises(RuntimeError, match="placement check"):
        dpcourse.DataParallel(examples.make_model(), devices=dpcourse.devices(2))(x)
    with pytest.raises(RuntimeError, match="placement check"):
        dpcourse.replicate(examples.make_model(), dpcourse.devices(2))


def torch_randn(*shape: int):
    import torch

    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", sorted(EXPERIMENTS))
def test_every_quiz_experiment_runs_with_devices_standing_in_for_gpus(name, stand_in_gpu):
    EXPERIMENTS[name]()
