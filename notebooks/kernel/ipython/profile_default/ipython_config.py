# The kernels that build and test the lessons (IPYTHONDIR=notebooks/kernel/ipython, set in notebooks/conftest.py) keep no
# command history: nothing is written into the repository.
c = get_config()  # noqa: F821 (IPython defines it)
c.HistoryManager.enabled = False
