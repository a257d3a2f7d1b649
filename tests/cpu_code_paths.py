"""What the CPU code-path tests share: the code paths, the floats a stored output prints, nbval on another path.

Every stored output must be the same on every CPU: the lessons print what carries meaning, not the last bits of a float.

torch picks its CPU kernels by the vector instructions it finds (AVX-512, AVX2, or none: ``default``), and MKL does
the same; sums taken in another order differ in their last bits. A loss printed with every digit, or "max |diff|
3e-08", then reads differently on another machine, and nbval fails there. So the lessons print losses to 4 decimals
and differences as ``examples.gap`` does ("below 1e-6"), and nbval's sanitizer rewrites no float.

Three test files hold it:
- test_outputs_every_digit.py scans every stored output for a float printed with every digit (what broke lesson 01
  on AVX-512 CPUs);
- test_code_path_default.py and test_code_path_avx2.py run nbval on the instructor edition of every lesson whose stored
  outputs hold a float, with torch and MKL forced onto another code path than this CPU's own (the normal run, on
  both editions, is the third).
  Two files, so that pytest-xdist's workers (whole files each) take one each.
"""

import json
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

from dpcourse import course

ROOT = Path(__file__).resolve().parent.parent
EDITIONS = [ROOT / "notebooks", ROOT / "notebooks" / "student"]

# Each forces torch (ATEN_CPU_CAPABILITY) and MKL (MKL_ENABLE_INSTRUCTIONS) onto one instruction set; any x86-64
# CPU that torch supports has both. README, "Running the tests", names the two variables.
CODE_PATHS = {
    "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
}

# A float with 8 or more digits after the point, e.g. 1.3538929224014282 or 2.9802322e-08: float32's last bits.
EVERY_DIGIT = re.compile(r"(?<![\w.])-?\d+\.\d{8,}(?:e[-+]?\d+)?\b|(?<![\w.])-?\d\.\d{6,}e[-+]?\d+\b")
# Any float at all: the lessons whose outputs hold none cannot differ between code paths.
A_FLOAT = re.compile(r"(?<![\w.])-?\d+\.\d+|\d(?:\.\d+)?e[-+]\d+")


def output_texts(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, text) for every text a code cell's stored outputs hold: streams, plain text, Markdown, HTML."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    texts = []
    for index, cell in enumerate(cells):
        for output in cell.get("outputs", []):
            found = [output.get("text", "")] + [output.get("data", {}).get(kind, "")
                                                for kind in ("text/plain", "text/markdown", "text/html")]
            texts += [(index, "".join(text) if isinstance(text, list) else text) for text in found if text]
    return texts


def floats_with_every_digit(notebook: Path) -> list[tuple[int, str]]:
    """(cell index, the float) for each float a stored output prints with every digit."""
    return [(index, match.group()) for index, text in output_texts(notebook) for match in EVERY_DIGIT.finditer(text)]


def lessons_with_floats() -> list[course.Lesson]:
    return [lesson for lesson in course.LESSONS
            if any(A_FLOAT.search(text) for edition in EDITIONS
                   for _, text in output_texts(edition / f"{lesson.name}.ipynb"))]


FLOAT_LESSONS = lessons_with_floats()
X86 = platform.machine() in ("x86_64", "AMD64")  # the code paths named are x86-64's


def nbval_on_code_path(lesson: course.Lesson, path: str) -> None:
    """nbval on the instructor edition of ``lesson`` in a pytest of its own, ``CODE_PATHS[path]`` set; fails with
    its log. The instructor edition runs every cell the student edition runs, with the solutions too: the student
    edition's stubs print no float (the check says the function is not written yet)."""
    notebooks = [str(ROOT / "notebooks" / f"{lesson.name}.ipynb")]
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "0", "-q", "--no-header", *notebooks]
    ran = subprocess.run(command, cwd=ROOT, env={**os.environ, **CODE_PATHS[path]}, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, f"nbval with {CODE_PATHS[path]}:\n{ran.stdout[-6000:]}"
