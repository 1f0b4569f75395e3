"""Every command block of the README works when pasted, in order, after ``make run``.

The server is what ``make run`` serves: a fresh SQLite database in its own data folder,
migrated, with the demo loaded, and the server with ``DJANGO_DEBUG=1`` (here on a free port, which
replaces ``localhost:8000`` in the commands). The blocks then run in one shell, one after the
other (a ``KEY`` set in one is there for the next), as an operator in a second terminal at the
repository's root: no venv on ``PATH``, no ``DJANGO_*`` variables, nothing of the suite's
settings. ``curl`` fails on an HTTP error (``--fail-with-body``), the shell on any failed command.

Left out, and why:
- the first block (``make run`` / ``make test``): the server below is ``make run``'s, and
  ``make test`` is this suite;
- the line of "Run a cluster with a real CLI agent" that starts the runner: it needs a real LLM
  CLI (``claude``) on the machine. The cluster it would work is created and started.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import Server

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
VENV_BIN = Path(sys.executable).parent


def readme_blocks(text: str) -> list[tuple[str, str]]:
    """Each ```sh block of a markdown text with the heading it stands under."""
    blocks: list[tuple[str, str]] = []
    heading = ""
    for match in re.finditer(r"^(#{1,6} [^\n]*)$|^```sh\n(.*?)^```$", text, re.M | re.S):
        if match.group(1):
            heading = match.group(1).lstrip("# ").strip()
        else:
            blocks.append((heading, match.group(2)))
    return blocks


def runnable(heading: str, block: str) -> str:
    """The block as the test runs it: without the lines that need a real LLM CLI."""
    if heading == "Run a cluster with a real CLI agent":
        lines = block.splitlines()
        kept = [line for line in lines if "zeroshot_runner" not in line]
        assert len(kept) == len(lines) - 1, "one runner line, the only one left out"
        return "\n".join(kept) + "\n"
    return block


def operator_env(data_dir: Path) -> dict[str, str]:
    """A shell as an operator's: PATH without the venv, none of the suite's Django settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DJANGO_", "PYTEST", "ZEROSHOT_"))
        and k not in ("DATABASE_URL", "REDIS_URL", "VIRTUAL_ENV")
    }
    env["PATH"] = os.pathsep.join(
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != VENV_BIN.resolve()
    )
    env["ZEROSHOT_DATA_DIR"] = str(data_dir)  # `make run`'s data/, fresh for the test
    return env


@pytest.fixture
def make_run_server(tmp_path: Path) -> Iterator[tuple[Server, dict[str, str]]]:
    """What `make run` serves, over a fresh database; with the operator's shell environment."""
    shell_env = operator_env(tmp_path / "data")
    server_env = {
        **shell_env,
        "DJANGO_DEBUG": "1",
        "PATH": f"{VENV_BIN}{os.pathsep}{shell_env['PATH']}",
    }
    for command in (["migrate", "--noinput", "-v", "0"], ["demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            env=server_env,
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    server = Server(server_env, tmp_path / "server.log")
    server.start()
    try:
        yield server, shell_env
    finally:
        server.stop()


def test_readme_blocks_are_what_this_test_runs() -> None:
    blocks = readme_blocks(README.read_text())
    assert "make run" in blocks[0][1]
    assert len(blocks) >= 3


def test_every_readme_command_block_works_in_order_after_make_run(
    make_run_server: tuple[Server, dict[str, str]], tmp_path: Path
) -> None:
    server, env = make_run_server
    blocks = readme_blocks(README.read_text())[1:]
    preamble = 'set -euo pipefail\ncurl() { command curl --fail-with-body -sS "$@"; echo; }\n'
    script = preamble + "".join(
        f"echo '### {heading}'\n" + runnable(heading, block) for heading, block in blocks
    )
    script = script.replace("localhost:8000", f"localhost:{server.port}")
    (tmp_path / "readme.sh").write_text(script)

    done = subprocess.run(
        ["bash", str(tmp_path / "readme.sh")],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert '"topic":"ISSUE_OPENED"' in done.stdout.replace(" ", "")
