"""Open the course: your own copies of the lessons, trusted, in JupyterLab.

    python -m dpcourse.open               # copy new lessons into my-course/, then start JupyterLab there
    python -m dpcourse.open --no-lab      # only copy (and trust) them
    python -m dpcourse.open --port 8890   # any other argument goes to `jupyter lab`

What it does, and why:

* **Copies** the student edition, ``notebooks/student/*.ipynb`` (the lessons of ``dpcourse.course``), into
  ``my-course/`` at the repository root, which git ignores. Installed without a clone (``pip install .``), it
  copies them from ``<prefix>/share/dpcourse/lessons`` into ``my-course/`` in the current folder.
  You work in the copies, so opening or running a lesson never changes the repository, and
  the file browser shows the lessons and nothing else. A copy you already have is never overwritten; a
  lesson added to the course later is copied next to yours. For a fresh copy of a lesson, rename or delete
  yours and run this again.
* **Trusts** each new copy, as ``jupyter trust`` does (``nbformat.sign``). JupyterLab shows the saved
  widgets of a trusted notebook as widgets; in an untrusted one it shows their plain-text stand-ins until the
  cell runs again.
* **Stamps** each new copy with the ``kernelspec`` and ``language_info`` that JupyterLab writes into a
  notebook when this environment's ``python3`` kernel starts (``kernel_metadata``). With any other value the
  lesson would open already marked modified (●).
* **Starts JupyterLab** in ``my-course/`` on 127.0.0.1 (``--allow-root`` when run as root), with the
  pop-up "Would you like to get notified about official Jupyter news?" switched off. Its plugin,
  ``@jupyterlab/apputils-extension:announcements``, is disabled by the page config in
  ``dpcourse/jupyter_config/``, which ``JUPYTER_CONFIG_PATH`` adds for this server only: your own settings and
  other JupyterLabs are left alone. (``--LabApp.news_url=None`` does not stop the pop-up in JupyterLab 4.6.)
* **Saves widgets for a later visit.** A widget the learner's kernel made is gone once that kernel stops, and its
  saved output would then read "Error displaying widget: model not found". The same folder's
  ``jupyter_server_config.py`` has the server save such an output as the sentence "▶ Run this cell to answer or
  explore", the one a lesson's saved widgets show before their cell runs; the open tab keeps its live widgets.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import nbformat
from ipykernel.ipkernel import IPythonKernel
from jupyter_client.kernelspec import KernelSpecManager
from nbformat.sign import NotebookNotary

from . import course
from .ui.words import plural

REPOSITORY = Path(__file__).resolve().parent.parent
IN_A_CLONE = (REPOSITORY / "notebooks" / "student").is_dir()
# In a clone, the student edition itself; in an installed copy (pip install ., Colab), the copy of it that
# pyproject.toml's data-files put under the environment's prefix.
LESSONS = REPOSITORY / "notebooks" / "student" if IN_A_CLONE else Path(sys.prefix) / "share" / "dpcourse" / "lessons"
COURSE_FOLDER = (REPOSITORY if IN_A_CLONE else Path.cwd()) / "my-course"
LAB_CONFIG = Path(__file__).resolve().parent / "jupyter_config"  # a Jupyter config directory (page, server)
KERNEL = "python3"


class Copies(NamedTuple):
    """What ``prepare`` did: the copies it made (new lessons) and the learner's copies it left as they were."""

    made: list[Path]
    kept: list[Path]


def kernel_metadata() -> dict:
    """The notebook metadata JupyterLab 4.6 sets when this environment's ``python3`` kernel connects.

    ``kernelspec`` is the kernel's name, display name and language (``@jupyterlab/notebook``'s panel takes them
    from the kernel spec), ``language_info`` what the kernel reports, Python's version included (ipykernel's
    ``IPythonKernel.language_info``). A notebook that already holds exactly these opens unmodified.
    """
    spec = KernelSpecManager().get_kernel_spec(KERNEL)
    return {
        "kernelspec": {"name": KERNEL, "display_name": spec.display_name, "language": spec.language},
        "language_info": dict(IPythonKernel.language_info),
    }


def prepare(folder: Path = COURSE_FOLDER, lessons: Path = LESSONS) -> Copies:
    """Copy each lesson in ``lessons`` that ``folder`` lacks into ``folder``, stamped and trusted.

    A notebook already in ``folder`` is the learner's: it is neither overwritten nor re-trusted.
    The lessons are those of ``dpcourse.course``, in its order. Raises ``FileNotFoundError`` when ``lessons``
    holds none of them.
    """
    sources = [lessons / f"{lesson.name}.ipynb" for lesson in course.LESSONS]
    sources = [source for source in sources if source.is_file()]
    if not sources:
        raise FileNotFoundError(
            f"No lessons in {lessons}: dpcourse.open copies the student edition from a clone's notebooks/student/, "
            f"or from <prefix>/share/dpcourse/lessons, where `pip install .` puts it. In a clone: `pip install -e .`."
        )
    folder.mkdir(parents=True, exist_ok=True)
    metadata, notary = kernel_metadata(), NotebookNotary()
    made, kept = [], []
    for source in sources:
        copy = folder / source.name
        if copy.exists():
            kept.append(copy)
            continue
        notebook = nbformat.read(source, as_version=4)
        notebook.metadata.update(metadata)
        nbformat.write(notebook, copy)
        notary.sign(notebook)  # records the digest of exactly what was written
        made.append(copy)
    return Copies(made, kept)


def running_as_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def lab_command(folder: Path, lab_args: Sequence[str] = ()) -> list[str]:
    """``jupyter lab`` serving ``folder`` on 127.0.0.1, with this interpreter; ``lab_args`` come last, so they win."""
    command = [sys.executable, "-m", "jupyterlab", "--ip=127.0.0.1", f"--ServerApp.root_dir={folder}"]
    if running_as_root():
        command.append("--allow-root")  # jupyter_server refuses to start as root without it
    return command + list(lab_args)


def lab_environment() -> dict[str, str]:
    """This process's environment with ``LAB_CONFIG`` first on ``JUPYTER_CONFIG_PATH``: no news pop-up, and widget
    outputs saved for a later visit."""
    env = dict(os.environ)
    env["JUPYTER_CONFIG_PATH"] = os.pathsep.join(filter(None, [str(LAB_CONFIG), env.get("JUPYTER_CONFIG_PATH")]))
    return env


def describe(copies: Copies, folder: Path) -> str:
    """One or two lines for the terminal: what was copied where, and what was kept."""
    lines = [f"Your lessons are in {folder}."]
    if copies.made:
        lines.append(f"Copied and trusted {len(copies.made)} new: {', '.join(c.name for c in copies.made)}.")
    if copies.kept:
        lines.append(f"Kept {plural(len(copies.kept), 'copy', 'copies')} you already had, as they are.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m dpcourse.open",
        description="Copy the course's lessons into a folder of your own, trusted, and open it in JupyterLab.",
        epilog="Any other argument goes to `jupyter lab`, e.g. --port 8890 or --no-browser.",
        allow_abbrev=False,  # an abbreviation must not swallow one of jupyter lab's own options
    )
    parser.add_argument("--no-lab", action="store_true", help="only copy the new lessons; do not start JupyterLab")
    parser.add_argument("--folder", type=Path, default=COURSE_FOLDER, help="where the copies go (default: my-course/)")
    args, lab_args = parser.parse_known_args(argv)
    folder = args.folder.resolve()
    try:
        copies = prepare(folder)
    except FileNotFoundError as error:
        parser.exit(2, f"{parser.prog}: {error}\n")
    print(describe(copies, folder), flush=True)
    if args.no_lab:
        return
    print("Starting JupyterLab: open the http://127.0.0.1:... address it prints below.", flush=True)
    os.chdir(folder)  # the lessons' kernels start here too
    os.execve(sys.executable, lab_command(folder, lab_args), lab_environment())


if __name__ == "__main__":
    main()
