"""Run any CLI agent through the shell: prompt on stdin, stdout streamed, its JSON the result."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

from zeroshot_runner.processes import end_group
from zeroshot_runner.providers.agent_cli import AgentCli
from zeroshot_runner.providers.base import Job
from zeroshot_runner.records import Claim, Failed, Outcome
from zeroshot_runner.repair import Repair, Reply, run_with_repair
from zeroshot_runner.results import read_agent_output

# How much of stderr a failure quotes.
STDERR_TAIL_CHARS = 2000
# How often the wait for the agent looks at its stop signal and its deadline.
_TICK = 0.05
# Output pipes are drained this long after the agent's group is gone; longer means something
# outside the group holds them open, and the readers are left behind rather than waited for.
_DRAIN = 2.0
# The runner's own key stays with the runner: agents hand their results back through it.
_WITHHELD = ("ZEROSHOT_WEB_KEY",)


class CommandProvider:
    """Runs ``command`` with ``sh -c`` in a process group of its own, one process per task.

    With ``agent_cli`` it runs a named agent CLI instead (``claude``, ``codex``, …): the CLI's
    own command line, its stream read as it arrives, its session resumed for output repair.
    """

    def __init__(
        self,
        *,
        command: str | None = None,
        default_timeout: float,
        kill_grace: float = 5.0,
        environment: Mapping[str, str] | None = None,
        agent_cli: AgentCli | None = None,
    ) -> None:
        if (command is None) == (agent_cli is None):
            raise ValueError("a command provider runs either a command or an agent CLI")
        self.command = command
        self.agent_cli = agent_cli
        self.default_timeout = default_timeout
        self.kill_grace = kill_grace
        self.environment = dict(os.environ if environment is None else environment)
        self._lock = threading.Lock()
        self._groups: set[int] = set()

    def run(self, job: Job) -> Outcome:
        """Run the command for one task until it exits, times out or is stopped."""
        claim = job.claim
        timeout = claim.agent.timeout_ms / 1000 if claim.agent.timeout_ms else self.default_timeout
        if self.agent_cli is not None:

            def execute(
                job: Job, argv: tuple[str, ...], *, stdin: str, on_line: Callable[[str], None]
            ) -> str | Failed:
                return self.execute(
                    job, argv, shell=False, stdin=stdin, timeout=timeout, on_line=on_line
                )

            return self.agent_cli.run(job, execute)
        command = self.command
        assert command is not None

        def attempt(repair: Repair | None) -> Reply | Failed:
            # No session to go back to: a repair runs the command again, its prompt extended.
            prompt = claim.prompt if repair is None else f"{claim.prompt}\n\n{repair.prompt}"
            ran = self.execute(job, command, shell=True, stdin=prompt, timeout=timeout)
            if isinstance(ran, Failed):
                return ran
            return Reply(read=read_agent_output(ran))

        return run_with_repair(job, attempt)

    def execute(
        self,
        job: Job,
        args: str | Sequence[str],
        *,
        shell: bool,
        stdin: str,
        timeout: float,
        on_line: Callable[[str], None] | None = None,
        environment: Mapping[str, str] | None = None,
    ) -> str | Failed:
        """Run one agent process to its end: its whole stdout, or why it did not finish.

        Each stdout line goes to ``on_line`` when given, else to the task's output. The process
        runs in the job's working directory (its cluster's workspace) when it has one.
        """
        claim = job.claim
        try:
            process = subprocess.Popen(
                args,
                shell=shell,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                cwd=job.workdir,
                env={**self._environment_for(claim), **(environment or {})},
            )
        except OSError as error:
            return Failed(error=f"the agent command could not start: {error}", retryable=True)
        # start_new_session makes the agent the leader of a new group whose id is its pid.
        group = process.pid
        with self._lock:
            self._groups.add(group)
        try:
            return self._watch(
                process, job, timeout=timeout, stdin=stdin, on_line=on_line or job.emit
            )
        finally:
            with self._lock:
                self._groups.discard(group)

    def close(self) -> None:
        """Kill every agent still running: the runner is exiting without waiting for them."""
        with self._lock:
            groups = list(self._groups)
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)

    def _watch(
        self,
        process: subprocess.Popen[bytes],
        job: Job,
        *,
        timeout: float,
        stdin: str,
        on_line: Callable[[str], None],
    ) -> str | Failed:
        group = process.pid
        assert process.stdin is not None
        assert process.stdout is not None
        assert process.stderr is not None
        stdout: list[str] = []
        stderr = _Tail(STDERR_TAIL_CHARS)
        exited = threading.Event()
        helpers = [
            _start(_feed, process.stdin, stdin.encode("utf-8", errors="replace")),
            _start(_read_lines, process.stdout, stdout, on_line),
            _start(_read_tail, process.stderr, stderr),
        ]
        _start(_reap, process, exited)

        deadline = time.monotonic() + timeout
        ended_by = None
        while not exited.wait(_TICK):
            if job.stop.is_set():
                ended_by = "stop"
                break
            if time.monotonic() >= deadline:
                ended_by = "timeout"
                break
        # Whatever ended the run, nothing the agent started may outlive it.
        end_group(group, grace=self.kill_grace)
        exited.wait(self.kill_grace + 1.0)
        for helper in helpers:
            helper.join(_DRAIN)

        if ended_by == "stop":
            return Failed(error="the runner stopped the agent", retryable=True)
        if ended_by == "timeout":
            return Failed(
                error=_with_stderr(
                    f"the agent did not finish within {timeout:g} s and was killed", stderr
                ),
                retryable=True,
            )
        code = process.returncode
        if code is None:
            return Failed(error="the agent command did not end when killed", retryable=True)
        if code != 0:
            return Failed(error=_with_stderr(_exit_description(code), stderr), retryable=True)
        return "".join(stdout)

    def _environment_for(self, claim: Claim) -> dict[str, str]:
        environment = {
            name: value for name, value in self.environment.items() if name not in _WITHHELD
        }
        # A script agent reads who it is from these instead of parsing its prompt.
        environment.update(
            ZEROSHOT_TASK_ID=claim.task_id,
            ZEROSHOT_AGENT_ID=claim.agent_id,
            ZEROSHOT_AGENT_ROLE=claim.agent.role,
            ZEROSHOT_ITERATION=str(claim.iteration),
            ZEROSHOT_CLUSTER_ID=claim.cluster_id or "",
        )
        if claim.agent.model:
            environment["ZEROSHOT_AGENT_MODEL"] = claim.agent.model
        return environment


class _Tail:
    """The last ``size`` characters of a stream, kept as it is read."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.text = ""

    def add(self, chunk: str) -> None:
        self.text = (self.text + chunk)[-self.size :]


def _start(target: Callable[..., object], *args: object) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


def _feed(stdin: IO[bytes], prompt: bytes) -> None:
    # An agent may exit without reading its prompt; that is its business, not an error here.
    try:
        stdin.write(prompt)
        stdin.close()
    except OSError:
        pass


def _read_lines(stdout: IO[bytes], lines: list[str], on_line: Callable[[str], None]) -> None:
    for raw in iter(stdout.readline, b""):
        # A newline byte never occurs inside a UTF-8 sequence, so lines decode one at a time.
        text = raw.decode("utf-8", errors="replace")
        lines.append(text)
        on_line(text.rstrip("\r\n"))
    stdout.close()


def _read_tail(stderr: IO[bytes], tail: _Tail) -> None:
    for raw in iter(stderr.readline, b""):
        tail.add(raw.decode("utf-8", errors="replace"))
    stderr.close()


def _reap(process: subprocess.Popen[bytes], exited: threading.Event) -> None:
    process.wait()
    exited.set()


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"the agent command was killed by signal {name}"
    return f"the agent command exited with code {code}"


def _with_stderr(message: str, stderr: _Tail) -> str:
    tail = stderr.text.strip()
    return f"{message}; stderr: {tail}" if tail else f"{message}; stderr was empty"
