"""Reading the deployment's files (Dockerfile, .dockerignore, compose.yaml, deploy/nginx.conf) and
running what they say as local processes, for the tests of tests/deploy/.

Containers do not run here, so each part runs as the command its container would run: the
image's CMD (uvicorn) with the image's ENV and compose's environment, compose's migrate and
runner commands, and, standing in for nginx, a small TCP proxy that balances over the upstreams
of deploy/nginx.conf in turn and skips one that refuses connections.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import yaml

from tests.live_server import (
    REPO,
    dockerfile_cmd,
    dockerfile_instructions,
    dockerfile_values,
    free_port,
    served_cmd,
)

COMPOSE = REPO / "compose.yaml"
NGINX = REPO / "deploy" / "nginx.conf"


# --- Dockerfile ----------------------------------------------------------------------------------


def dockerfile_env() -> dict[str, str]:
    """The image's ENV, every ``KEY=value`` of every ENV instruction."""
    env: dict[str, str] = {}
    for args in dockerfile_values("ENV"):
        for pair in shlex.split(args):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


def build_context() -> list[Path]:
    """The files ``docker build .`` sends, as .dockerignore leaves them (its patterns as used
    there: names and paths from the context's root, ``**/`` for any depth)."""
    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]

    def ignored(relative: str) -> bool:
        for pattern in patterns:
            if pattern.startswith("**/"):
                name = pattern[3:]
                if any(fnmatch(part, name) for part in relative.split("/")):
                    return True
            elif fnmatch(relative, pattern) or relative.startswith(pattern.rstrip("/") + "/"):
                return True
        return False

    files = []
    for root, dirs, names in os.walk(REPO):
        base = Path(root).relative_to(REPO).as_posix()
        prefix = "" if base == "." else base + "/"
        dirs[:] = [d for d in dirs if not ignored(prefix + d)]
        files.extend(REPO / (prefix + n) for n in names if not ignored(prefix + n))
    return files


# --- compose.yaml --------------------------------------------------------------------------------


def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` with ``variables``."""

    def one(match: re.Match[str]) -> str:
        name, operator, rest = match.group(1), match.group(2), match.group(3)
        given = variables.get(name, "")
        if operator == ":?" and not given:
            raise KeyError(f"compose needs {name}: {rest}")
        if operator == ":-" and not given:
            return rest or ""
        return given

    return re.sub(r"\$\{([A-Z0-9_]+)(?:(:[-?])([^}]*))?\}", one, value)


def service_environment(service: Mapping[str, Any], variables: Mapping[str, str]) -> dict[str, str]:
    environment = service.get("environment") or {}
    assert isinstance(environment, dict), "environment as a mapping"
    return {key: interpolate(str(value), variables) for key, value in environment.items()}


def nginx_upstreams() -> tuple[int, list[tuple[str, int]]]:
    """The port nginx listens on and its upstream servers, as (host, port)."""
    text = NGINX.read_text()
    (listen,) = re.findall(r"^\s*listen\s+(\d+);", text, flags=re.MULTILINE)
    block = re.search(r"upstream\s+\w+\s*\{(.*?)\}", text, flags=re.DOTALL)
    assert block is not None
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", block.group(1), flags=re.MULTILINE)
    return int(listen), [(host, int(port)) for host, port in servers]


# --- processes -----------------------------------------------------------------------------------


class Proxy:
    """A TCP proxy on a free port: each connection goes to the next upstream in turn, and to the
    one after it when that one refuses (as nginx's ``proxy_next_upstream error``)."""

    def __init__(self, upstreams: list[int]) -> None:
        self.upstreams = upstreams
        self.served: Counter[int] = Counter()
        self.refused: Counter[int] = Counter()
        self._turn = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=256)
        self.port = int(self._listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._listener.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            start = self._turn
            self._turn += 1
        for i in range(len(self.upstreams)):
            port = self.upstreams[(start + i) % len(self.upstreams)]
            try:
                upstream = socket.create_connection(("127.0.0.1", port), timeout=2)
            except OSError:
                with self._lock:
                    self.refused[port] += 1
                continue
            upstream.settimeout(None)
            with self._lock:
                self.served[port] += 1
            threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
            _pipe(client, upstream)
            return
        client.close()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock in (source, target):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def executable(name: str) -> str:
    """A command's program as the image has it on its PATH, found in this venv."""
    if name in {"python", "python3"}:
        return sys.executable
    local = Path(sys.executable).parent / name
    assert local.exists(), f"{name} is not installed next to {sys.executable}"
    return str(local)


def server_argv(port: int) -> list[str]:
    """The image's CMD, listening on ``port`` of the loopback instead of 8000 on every address
    (``tests.live_server.served_cmd``), its program found as the image's PATH would."""
    argv = served_cmd(port)
    return [executable(argv[0]), *argv[1:]]


def start(argv: list[str], env: Mapping[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(argv, env=dict(env), cwd=REPO, stdout=out, stderr=subprocess.STDOUT)


def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"exited early:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"not listening on {port}:\n{log.read_text(errors='replace')[-3000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


__all__ = ["REPO", "dockerfile_cmd", "dockerfile_instructions", "dockerfile_values", "free_port"]
