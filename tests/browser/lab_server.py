"""A JupyterLab server for the browser tests: started on a copy of the notebooks, stopped by its own handle.

Measured facts behind the flags are in the project's JupyterLab tooling notes: ``--IdentityProvider.token`` is
the current token flag, root needs ``--allow-root``, the news toast only goes away through the notification
plugin's settings, and ``--LabApp.expose_app_in_browser`` gives tests ``window.jupyterapp``.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

# User settings for the session (JUPYTERLAB_SETTINGS_DIR): no news or update toasts over the screenshots, every
# cell in the DOM (the default windowing keeps far-away cells out of it, and the tests count widget views per
# cell), and no autosave: the notebooks are copies, but nothing should be written behind the test's back.
SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
}
START_TIMEOUT_S = 60


class LabServer:
    """``python -m jupyterlab`` serving ``root_dir`` on 127.0.0.1 with a port the OS gives it and a random token.

    The server binds port 0 itself and writes the port it got into its runtime file: a port picked here and
    handed over would stay free only until another process (a second pytest worker's server or ranks) took it.

    The server runs with this interpreter (``sys.executable``), so its ``python3`` kernelspec starts kernels
    with the same environment's Python. ``env`` is added to the server's environment, which its kernels inherit;
    ``settings`` are the user settings it starts with (default ``SETTINGS``).
    """

    def __init__(
        self, root_dir: Path, state_dir: Path, env: dict[str, str], settings: dict[str, dict] = SETTINGS
    ) -> None:
        self.root_dir = root_dir
        self.state_dir = state_dir
        self.token = os.urandom(16).hex()
        self.port: int | None = None  # known once start() has read the server's runtime file
        self.log_path = state_dir / "jupyterlab.log"
        self.process: subprocess.Popen | None = None
        self._env = env
        self._settings = settings

    def command(self) -> list[str]:
        command = [
            sys.executable, "-m", "jupyterlab", "--no-browser",
            "--ip", "127.0.0.1", "--port=0", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.root_dir}",
            "--LabApp.expose_app_in_browser=True",
        ]
        if os.geteuid() == 0:
            command.append("--allow-root")  # jupyter_server refuses to start as root without it
        return command

    def environment(self) -> dict[str, str]:
        settings = self.state_dir / "lab-settings"
        for plugin, values in self._settings.items():
            path = settings / f"{plugin}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        env = dict(os.environ)
        env.pop("MPLBACKEND", None)  # the kernels need ipykernel's inline backend to show figures
        env.update(
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(self.state_dir / "workspaces"),
            JUPYTER_RUNTIME_DIR=str(self.state_dir / "runtime"),
            JUPYTER_CONFIG_DIR=str(self.state_dir / "config"),  # ignore the user's ~/.jupyter
            IPYTHONDIR=str(self.state_dir / "ipython"),  # and their IPython startup files
        )
        env.update(self._env)
        return env

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            # A session of its own: if the server must be killed, its kernels go with it (see stop()).
            self.process = subprocess.Popen(
                self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )
        # jupyter_server writes jpserver-<its pid>.json once it listens (dpcourse.open execs it: the same pid).
        info_file = self.state_dir / "runtime" / f"jpserver-{self.process.pid}.json"
        self.port = None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with status {self.process.returncode}:\n{self.log_tail()}")
            try:
                if self.port is None:
                    self.port = json.loads(info_file.read_text())["port"]
                self.api("GET", "/api/status")
                return
            except (FileNotFoundError, json.JSONDecodeError, urllib.error.URLError, ConnectionError):
                time.sleep(0.25)
        raise RuntimeError(f"JupyterLab did not answer /api/status within {START_TIMEOUT_S} s:\n{self.log_tail()}")

    @contextlib.contextmanager
    def running(
        self, timings: dict[str, float] | None = None, label: str = "JupyterLab start"
    ) -> Iterator["LabServer"]:
        """Start the server, note how long that took under ``label`` in ``timings``, and stop it on the way out."""
        start = time.monotonic()
        try:
            self.start()
            if timings is not None:
                timings[label] = time.monotonic() - start
            yield self
        finally:
            self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str) -> object:
        request = urllib.request.Request(f"{self.url}{path}", method=method)
        request.add_header("Authorization", f"token {self.token}")
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shutdown_kernels(self, path: str | None = None) -> None:
        """Shut down the kernels of the sessions open on ``path`` (every session when None)."""
        for session in self.api("GET", "/api/sessions"):
            if path is None or session["path"] == path:
                self.api("DELETE", f"/api/sessions/{session['id']}")

    def stop(self) -> None:
        """Shut the kernels down, then terminate the server; kill its whole session if it does not exit."""
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.shutdown_kernels()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass  # the server is unwell; terminating it below still stops its kernels
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)  # the group we created in start(): server and kernels
            self.process.wait(timeout=15)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class CourseLab(LabServer):
    """JupyterLab as ``python -m dpcourse.open`` starts it on the folder ``root_dir`` (copying the lessons it
    lacks), plus what a test needs: a port, a token, the app. Started again on the same folder, it is the
    learner coming back: their copies are kept as they are."""

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "dpcourse.open", f"--folder={self.root_dir}",
            "--no-browser", "--port=0", "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={self.token}", "--LabApp.expose_app_in_browser=True",
        ]
