"""dpcourse.open: the learner's copies of the lessons (made once, never overwritten, trusted, stamped with the
kernel's metadata) and the JupyterLab command it hands over to. The browser side is tests/browser/test_first_open.py.
"""

import asyncio
import concurrent.futures
import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from nbformat.sign import NotebookNotary

from dpcourse import open as course

if TYPE_CHECKING:
    from jupyter_server.services.contents.manager import ContentsManager
    from traitlets.config import Config

ROOT = Path(__file__).resolve().parent.parent
ANNOUNCEMENTS = "@jupyterlab/apputils-extension:announcements"


@pytest.fixture(autouse=True)
def own_trust_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Signatures go to a temporary Jupyter data folder, never to the user's."""
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "jupyter-data"))


@pytest.fixture
def lessons(tmp_path: Path) -> Path:
    """Two small lessons with a stored output, metadata as a short kernelspec (what JupyterLab would replace)."""
    folder = tmp_path / "lessons"
    folder.mkdir()
    for name in ("00_start_here", "01_one_device"):
        cell = nbformat.v4.new_code_cell("1 + 1", execution_count=1)
        cell.outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)]
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(f"# {name}"), cell])
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(notebook, folder / f"{name}.ipynb")
    return folder


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def test_new_lessons_are_copied_stamped_and_trusted(lessons: Path, tmp_path: Path) -> None:
    folder = tmp_path / "my-course"
    copies = course.prepare(folder, lessons)
    assert [path.name for path in copies.made] == ["00_start_here.ipynb", "01_one_device.ipynb"] and copies.kept == []
    notary = NotebookNotary()
    for copy in copies.made:
        notebook = read(copy)
        assert notebook.cells == read(lessons / copy.name).cells
        assert notebook.metadata["kernelspec"] == course.kernel_metadata()["kernelspec"]
        assert notebook.metadata["language_info"]["version"] == sys.version.split()[0]
        assert notary.check_signature(notebook), f"{copy.name} should be trusted"
    assert not notary.check_signature(read(lessons / "00_start_here.ipynb")), "the originals are not what was trusted"


def test_the_kernel_metadata_is_what_jupyterlab_writes_for_this_python() -> None:
    metadata = course.kernel_metadata()
    assert metadata["kernelspec"]["name"] == "python3" and metadata["kernelspec"]["language"] == "python"
    assert metadata["language_info"]["name"] == "python"
    assert metadata["language_info"]["codemirror_mode"] == {"name": "ipython", "version": sys.version_info[0]}


def test_a_learners_copy_is_never_overwritten_and_new_lessons_are_added(lessons: Path, tmp_path: Path) -> None:
    folder = tmp_path / "my-course"
    course.prepare(folder, lessons)
    mine = folder / "00_start_here.ipynb"
    edited = read(mine)
    edited.cells[1].source = "answer = 42"
    nbformat.write(edited, mine)
    before = mine.read_bytes()
    nbformat.write(read(lessons / "01_one_device.ipynb"), lessons / "02_scatter.ipynb")
    copies = course.prepare(folder, lessons)
    assert [path.name for path in copies.made] == ["02_scatter.ipynb"]
    assert [path.name for path in copies.kept] == ["00_start_here.ipynb", "01_one_device.ipynb"]
    assert mine.read_bytes() == before
    assert not NotebookNotary().check_signature(read(mine)), "a learner's edited copy is not trusted behind their back"


def test_the_folder_holds_the_student_lessons_and_nothing_else(tmp_path: Path) -> None:
    folder = tmp_path / "my-course"
    course.prepare(folder)
    student = sorted(path.name for path in (ROOT / "notebooks" / "student").glob("*.ipynb"))
    assert student and sorted(path.name for path in folder.iterdir()) == student


def test_no_lessons_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"No lessons in .*notebooks/student/.*pip install -e \."):
        course.prepare(tmp_path / "my-course", tmp_path / "empty")


def test_the_default_folder_is_my_course_and_git_ignores_it() -> None:
    assert course.COURSE_FOLDER == ROOT / "my-course"
    assert "/my-course/" in (ROOT / ".gitignore").read_text().splitlines()


def no_exec(*args: object) -> None:
    raise AssertionError("JupyterLab should not start")


def test_no_lab_only_prepares(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr(os, "execve", no_exec)
    course.main(["--no-lab", f"--folder={tmp_path / 'mine'}"])
    lessons = len(list(course.LESSONS.glob("*.ipynb")))
    assert len(list((tmp_path / "mine").glob("*.ipynb"))) == lessons
    assert f"Copied and trusted {lessons} new" in capsys.readouterr().out


def test_jupyterlab_starts_in_the_folder_on_localhost_with_the_extra_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = {}

    def record(executable: str, command: list[str], env: dict[str, str]) -> None:
        started.update(executable=executable, command=command, env=env, cwd=Path.cwd())

    monkeypatch.setattr(os, "execve", record)
    monkeypatch.chdir(tmp_path)  # main() moves into the folder; monkeypatch moves back afterwards
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "/somewhere/else")
    folder = tmp_path / "mine"
    course.main([f"--folder={folder}", "--port", "8890", "--no-browser"])
    command = started["command"]
    assert started["executable"] == sys.executable and command[:3] == [sys.executable, "-m", "jupyterlab"]
    assert "--ip=127.0.0.1" in command and f"--ServerApp.root_dir={folder}" in command
    assert command[-3:] == ["--port", "8890", "--no-browser"]
    assert ("--allow-root" in command) == (os.geteuid() == 0)
    assert started["cwd"] == folder
    assert started["env"]["JUPYTER_CONFIG_PATH"] == os.pathsep.join([str(course.LAB_CONFIG), "/somewhere/else"])


def test_the_lab_config_disables_the_news_popup() -> None:
    page_config = json.loads((course.LAB_CONFIG / "labconfig" / "page_config.json").read_text())
    assert page_config == {"disabledExtensions": {ANNOUNCEMENTS: True}}


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def server_config() -> tuple["Config", dict]:
    """The configuration the course's server reads from ``jupyter_config/``, read as Jupyter reads it, and the
    names that file defines."""
    from traitlets.config import Config

    config = Config()
    names = runpy.run_path(str(course.LAB_CONFIG / "jupyter_server_config.py"),
                           init_globals={"get_config": lambda: config})
    return config, names


def widget_output(model_id: str) -> nbformat.NotebookNode:
    view = {"model_id": model_id, "version_major": 2, "version_minor": 0}
    return nbformat.v4.new_output("execute_result", {WIDGET_VIEW: view, "text/plain": "Quiz()"}, execution_count=1)


def notebook_with_widgets(saved: str, ran: str) -> nbformat.NotebookNode:
    """A notebook whose saved widget state holds the model ``saved``; cell 0 shows it, cell 1 shows ``ran`` (a
    model of the kernel that ran it), cell 2 a view its widget closed, cell 3 plain text."""
    cells = [nbformat.v4.new_code_cell("quiz.ask()", execution_count=1) for _ in range(4)]
    cells[0].outputs, cells[1].outputs, cells[2].outputs = [widget_output(saved)], [widget_output(ran)], [
        widget_output("")]
    cells[3].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hello\n")]
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["widgets"] = {WIDGET_STATE: {"state": {saved: {"state": {}}}, "version_major": 2}}
    return notebook


def save(manager: "ContentsManager", notebook: nbformat.NotebookNode, path: str) -> None:
    """Save ``notebook`` at ``path`` through ``manager`` as JupyterLab's save does: its contents model, hooks run."""
    model = {"type": "notebook", "content": json.loads(nbformat.writes(notebook))}
    saved = manager.save(model, path)
    if asyncio.iscoroutine(saved):  # the server's default manager is the async one
        # In a thread of its own: an earlier test in this worker may have left an event loop running in this one
        # (nbclient's), where asyncio.run refuses to start.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(asyncio.run, saved).result()


def test_the_server_saves_a_widget_whose_model_is_gone_as_the_run_this_cell_sentence(tmp_path: Path) -> None:
    from dpcourse.ui.controls import RUN_THIS_CELL

    notebook = notebook_with_widgets(saved="a" * 32, ran="b" * 32)
    config, _ = server_config()
    save(config.ServerApp.contents_manager_class(root_dir=str(tmp_path)), notebook, "lesson.ipynb")
    written = read(tmp_path / "lesson.ipynb")
    kept, replaced, closed, text = (cell.outputs for cell in written.cells)
    assert replaced[0].data == {"text/html": RUN_THIS_CELL, "text/plain": "Quiz()"}
    assert (kept, closed, text) == (notebook.cells[0].outputs, notebook.cells[2].outputs, notebook.cells[3].outputs)
    assert written.metadata == notebook.metadata
    assert "Run this cell</b> to answer or explore" in RUN_THIS_CELL  # the sentence the build writes, one file


def test_a_quiz_saved_after_its_kernel_has_gone_keeps_its_question_and_the_last_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A return visit shows an answered quiz's question and the learner's last answer (from their progress file)
    under the "Run this cell" sentence, not the sentence alone."""
    from dpcourse.quiz import Progress, ask, find_question
    from dpcourse.quiz.widget import answer_slot
    from dpcourse.ui.controls import RUN_THIS_CELL

    progress_file = tmp_path / "progress.json"
    monkeypatch.setenv("DPCOURSE_PROGRESS", str(progress_file))  # the server's kernels share its environment
    question = find_question("02-six-rows-four-devices")
    quiz = ask(question)
    answered, untouched = (nbformat.v4.new_code_cell("quiz.ask()", execution_count=1) for _ in range(2))
    answered.outputs = [nbformat.v4.new_output("execute_result", quiz._repr_mimebundle_(), execution_count=1)]
    untouched.outputs = [nbformat.v4.new_output("execute_result", ask("02-mismatched-batches")._repr_mimebundle_(),
                                                execution_count=1)]
    Progress(progress_file).record(question, "4 <b>", False)
    Progress(progress_file).record(question, "3", True)

    config, _ = server_config()
    save(config.ServerApp.contents_manager_class(root_dir=str(tmp_path)),
         nbformat.v4.new_notebook(cells=[answered, untouched]), "lesson.ipynb")
    shown, unanswered = (cell.outputs[0].data["text/html"] for cell in read(tmp_path / "lesson.ipynb").cells)
    before, after = quiz.later_visit_html.split(answer_slot(question.id))
    assert shown.startswith(RUN_THIS_CELL + before) and shown.endswith(after)
    assert "Your last answer: <b>3</b> ✔ right" in shown and "4 &lt;b&gt;" not in shown
    assert unanswered.startswith(RUN_THIS_CELL) and "Your last answer" not in unanswered


def test_the_save_hook_leaves_other_files_alone() -> None:
    hook = server_config()[1]["widgets_for_a_later_visit"]
    text = {"type": "file", "format": "text", "content": '{"model_id": "x"}'}
    hook(model=text, path="notes.txt", contents_manager=None)
    assert text["content"] == '{"model_id": "x"}'
    hook(model={"type": "directory"}, path="lessons", contents_manager=None)


# Starts the course's server as `python -m dpcourse.open` does, every installed server extension included, up to
# the point where it would listen; then saves a notebook through the contents manager the server ended up with.
SERVER_START = """
import asyncio, json, sys, warnings
warnings.simplefilter("always")
from jupyterlab.labapp import LabApp
server = LabApp.initialize_server(argv=sys.argv[1:])
model = {"type": "notebook", "content": json.loads(sys.stdin.read())}
saved = server.contents_manager.save(model, "lesson.ipynb")
if asyncio.iscoroutine(saved):
    asyncio.run(saved)
"""


def test_the_course_server_starts_without_a_warning_and_keeps_its_save_hook(tmp_path: Path) -> None:
    """Server extensions (notebook_shim, jupytext) make traitlets apply the server's configuration again, and
    jupyter_server warns "Overriding existing pre_save_hook" each time a configured hook is set while one is. The
    course's server registers its hook instead, so it starts silent; and jupytext, which replaces the contents
    manager with one of its own, still saves through the hook."""
    folder = tmp_path / "my-course"
    folder.mkdir()
    argv = course.lab_command(folder, ["--no-browser", "--ServerApp.port=0"])[3:]  # after python -m jupyterlab
    env = course.lab_environment() | {"JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime")}
    notebook = notebook_with_widgets(saved="a" * 32, ran="b" * 32)
    started = subprocess.run([sys.executable, "-c", SERVER_START, *argv], input=nbformat.writes(notebook), env=env,
                             capture_output=True, text=True, timeout=120, check=False)
    assert started.returncode == 0, started.stderr[-3000:]
    assert "Overriding existing pre_save_hook" not in started.stderr
    replaced = read(folder / "lesson.ipynb").cells[1].outputs[0].data
    assert WIDGET_VIEW not in replaced and "Run this cell" in replaced["text/html"]
