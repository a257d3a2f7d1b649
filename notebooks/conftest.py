"""The one place that says how lessons run when they are built and tested: on CPU devices, placement checked.

nbval runs each lesson in a kernel that inherits this process's environment, notebooks/build.py sets the same
variables before it executes a lesson, and the browser tests start JupyterLab with them. The stored outputs
were made with CPU devices, so on a GPU machine too the lessons compare equal. ``IPYTHONDIR`` gives those
kernels notebooks/kernel/ipython/, whose startup file checks placement as if ``devices[0]`` were a GPU: a lesson that
would crash on a GPU machine (a model left on the CPU, a target that meets a GPU output) fails here too.
"""

import os
import tempfile
from pathlib import Path

LESSON_ENVIRONMENT = {
    "DPCOURSE_DEVICES": "cpu",
    "IPYTHONDIR": str(Path(__file__).resolve().parent / "kernel" / "ipython"),
    # The instructor edition's checks pass and are recorded: into a file of the tests', never the learner's.
    "DPCOURSE_PROGRESS": str(Path(tempfile.gettempdir()) / "dpcourse-lessons" / "progress.json"),
    # quiz.reveal lets a result through instead of hiding it until its quiz is answered: the instructor edition
    # stores the real outputs and nbval compares them (the student build then drops them, notebooks/build.py).
    "DPCOURSE_REVEAL": "print",
}

for _variable, _value in LESSON_ENVIRONMENT.items():
    os.environ.setdefault(_variable, _value)
