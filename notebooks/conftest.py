"""nbval runs each lesson in a kernel that inherits this process's environment.

The stored outputs were made with CPU devices (notebooks/build.py sets the same variable), so on a GPU
machine too the lessons run on CPU devices under test and their outputs compare equal.
"""

import os

os.environ.setdefault("DPCOURSE_DEVICES", "cpu")
