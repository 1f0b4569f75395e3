"""A real server for tests that need one: daphne in a subprocess over the test database.

A subprocess rather than a thread: Twisted's reactor runs once per process, and the server's
pipeline, channel layer and long polls then live in their own process, as in production.
Tests using it need ``pytest.mark.django_db(transaction=True)``: the server only sees what a
test has committed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import subprocess_database_url

REPO = Path(__file__).resolve().parents[1]
LISTEN_BACKLOG = 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LiveServer:
    """daphne serving ``zeroshot_web.asgi:application`` on a free port, logging to a file."""

    def __init__(self, data_dir: Path, *, env: Mapping[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "daphne.log"
        self.env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "ZEROSHOT_DATA_DIR": str(data_dir),
            "DJANGO_SETTINGS_MODULE": "zeroshot_web.test_settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "PYTHONUNBUFFERED": "1",
            # As a production server runs it: in a worker thread, with its sweep.
            "ZEROSHOT_PIPELINE": "thread",
            "ZEROSHOT_DATABASE_ON_REQUEST_THREAD": "0",
            **(env or {}),
        }
        self.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> LiveServer:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "daphne",
                    # As the operator's guide says to serve it: a listen queue that holds a
                    # burst of connections (Twisted's default holds 50).
                    "-e",
                    f"tcp:port={self.port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}",
                    "zeroshot_web.asgi:application",
                ],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._wait_until_listening()
        return self

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def _wait_until_listening(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited early:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"daphne did not listen on {self.port}:\n{self.log_tail()}")
