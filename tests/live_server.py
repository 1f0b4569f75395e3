"""A real server for tests that need one: the image's command in a subprocess.

Every test that starts a server runs what production runs: the Dockerfile's CMD (uvicorn, its
flags), listening on a free port of the loopback instead of 8000 on every address
(``production_argv``), so the two cannot drift apart. A subprocess rather than a thread: the
server's event loop, pipeline, channel layer and long polls then live in their own process, as
in production. Tests using ``LiveServer`` need ``pytest.mark.django_db(transaction=True)``: the
server only sees what a test has committed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Self

from tests.conftest import subprocess_database_url

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
ASGI_APP = "zeroshot_web.asgi:application"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- the Dockerfile's command --------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) in order, continuation lines joined, comments dropped."""
    lines: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    found = []
    for line in lines:
        instruction, _, arguments = line.partition(" ")
        found.append((instruction.upper(), arguments.strip()))
    return found


def dockerfile_values(instruction: str) -> list[str]:
    return [args for name, args in dockerfile_instructions() if name == instruction]


def dockerfile_cmd() -> list[str]:
    """The image's CMD, which must be the exec (JSON) form."""
    (cmd,) = dockerfile_values("CMD")
    argv = json.loads(cmd)
    assert isinstance(argv, list), cmd
    assert all(isinstance(a, str) for a in argv), cmd
    return argv


def served_cmd(port: int, host: str = "127.0.0.1") -> list[str]:
    """The image's CMD serving on ``host:port`` instead of 0.0.0.0:8000, as the image writes it
    (its first word the program's name)."""
    argv = dockerfile_cmd()
    for flag, was, now in (("--host", "0.0.0.0", host), ("--port", "8000", str(port))):
        assert argv.count(flag) == 1, (flag, argv)
        at = argv.index(flag) + 1
        assert argv[at] == was, (flag, argv)
        argv[at] = now
    assert argv[-1] == ASGI_APP, argv
    return argv


def production_argv(port: int, host: str = "127.0.0.1") -> list[str]:
    """``served_cmd`` run by this interpreter (``python -m <program>``): this venv's server."""
    program, *rest = served_cmd(port, host)
    return [sys.executable, "-m", program, *rest]


# --- a server process ----------------------------------------------------------------------------


class Server:
    """The production command on a port of the loopback, with ``env``, logging to ``log``.

    Started again on the same port after a stop: a browser page that lost its socket can then
    find its server back, as after a restart in production.
    """

    def __init__(self, env: Mapping[str, str], log: Path, port: int | None = None) -> None:
        self.env = dict(env)
        self.log = log
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Server:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                production_argv(self.port),
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self._wait_until_listening()
        return self

    def stop(self, timeout: float = 15) -> int | None:
        """SIGTERM, as a container's stop; its exit status (None when it had to be killed)."""
        if self.process is None:
            return None
        self.process.terminate()
        status: int | None
        try:
            status = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            status = None
        self.process = None
        return status

    def __enter__(self) -> Self:
        """Started for a ``with`` block (a fixture's), stopped when it ends however it ends."""
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def _wait_until_listening(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited early:\n{self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"the server did not listen on {self.port}:\n{self.log_tail()}")


class LiveServer(Server):
    """The production command serving the test database, its data in ``data_dir``."""

    def __init__(self, data_dir: Path, *, env: Mapping[str, str] | None = None) -> None:
        self.data_dir = data_dir
        full = {
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
        full.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        super().__init__(full, data_dir / "server.log")

    def start(self) -> LiveServer:
        super().start()
        return self
