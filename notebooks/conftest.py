"""The one place that says how lessons run when they are built and tested: on CPU devices.

nbval runs each lesson in a kernel that inherits this process's environment, notebooks/build.py sets the same
variables before it executes a lesson, and the browser tests start JupyterLab with them. The stored outputs
were made with CPU devices, so on a GPU machine too the lessons compare equal.
"""

import os

LESSON_ENVIRONMENT = {"DPCOURSE_DEVICES": "cpu"}

for _variable, _value in LESSON_ENVIRONMENT.items():
    os.environ.setdefault(_variable, _value)
