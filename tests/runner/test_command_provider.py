"""The command provider with real processes: small Python scripts stand in for CLI agents."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from tests.runner.helpers import agent_script, claim_for, job_for, pids_in, running, wait_until
from zeroshot_runner.providers.command import CommandProvider
from zeroshot_runner.records import Completed, Failed, Usage

# The per-task limit when the agent sets none; generous, the tests that time out set their own.
TIMEOUT = 30.0


def provider(command: str, environment: dict[str, str] | None = None) -> CommandProvider:
    return CommandProvider(
        command=command, default_timeout=TIMEOUT, kill_grace=0.5, environment=environment
    )


def test_the_prompt_arrives_on_stdin_and_the_final_json_is_the_result(tmp_path: Path) -> None:
    # given an agent that thinks aloud, then prints its result with usage fields
    command = agent_script(
        tmp_path,
        """
        import json, sys
        prompt = sys.stdin.read()
        print("reading the issue")
        print("writing the fix")
        print(json.dumps({"summary": "fixed", "promptChars": len(prompt),
                          "usage": {"input_tokens": 40, "output_tokens": 9}}))
        """,
    )
    # a prompt bigger than a pipe's buffer must not stall the agent or the runner
    prompt = "Fix the bug in parser.py.\n" + "context line\n" * 20_000
    job, lines = job_for(claim_for(prompt=prompt))

    # when
    outcome = provider(command).run(job)

    # then
    assert isinstance(outcome, Completed)
    assert outcome.result is not None
    assert outcome.result["summary"] == "fixed"
    assert outcome.result["promptChars"] == len(prompt)
    assert outcome.usage == Usage(input_tokens=40, output_tokens=9)
    assert lines.lines[:2] == ["reading the issue", "writing the fix"]
    assert len(lines.lines) == 3
    assert outcome.output.startswith("reading the issue\nwriting the fix\n{")


def test_a_claude_style_envelope_on_stdout_gives_the_agents_json(tmp_path: Path) -> None:
    command = agent_script(
        tmp_path,
        """
        import json
        print(json.dumps({"type": "result", "result": "Done: {\\"approved\\": true}",
                          "total_cost_usd": 0.01, "usage": {"input_tokens": 3,
                          "output_tokens": 2}}))
        """,
    )
    job, _ = job_for(claim_for())

    outcome = provider(command).run(job)

    assert outcome == Completed(
        result={"approved": True},
        output='Done: {"approved": true}',
        usage=Usage(input_tokens=3, output_tokens=2, cost_usd=0.01),
    )


def test_output_that_is_not_json_fails_as_retryable_with_a_readable_error(tmp_path: Path) -> None:
    command = agent_script(tmp_path, 'print("I am not sure what to do.")')
    job, _ = job_for(claim_for())

    outcome = provider(command).run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "no JSON object" in outcome.error
    assert "I am not sure what to do." in outcome.error


def test_a_text_agent_completes_with_its_output(tmp_path: Path) -> None:
    command = agent_script(tmp_path, 'print("Just words.")')
    job, _ = job_for(claim_for(outputFormat="text"))

    outcome = provider(command).run(job)

    assert outcome == Completed(result=None, output="Just words.\n")


def test_a_non_zero_exit_fails_with_the_code_and_the_tail_of_stderr(tmp_path: Path) -> None:
    # given an agent that writes much to stderr, ends with a telling line, and exits 1
    command = agent_script(
        tmp_path,
        """
        import sys
        sys.stderr.write("noise " * 2000)
        sys.stderr.write("\\nTraceback: ValueError: bad config\\n")
        print('{"ignored": true}')
        sys.exit(1)
        """,
    )
    job, _ = job_for(claim_for())

    outcome = provider(command).run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert outcome.error.startswith("the agent command exited with code 1; stderr: ")
    assert outcome.error.endswith("ValueError: bad config")
    # only the tail of stderr is quoted
    assert len(outcome.error) < 2_100


def test_an_agent_that_outlives_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    # given an agent with a 3 s timeout that starts a child which ignores SIGTERM, then hangs
    pids = tmp_path / "pids"
    command = agent_script(
        tmp_path,
        f"""
        import os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"])
        record_pids({str(pids)!r}, os.getpid(), child.pid)
        print("started", flush=True)
        time.sleep(60)
        """,
    )
    job, _ = job_for(claim_for(timeout=3000))
    started = time.monotonic()

    # when
    outcome = provider(command).run(job)

    # then the task fails as retryable, saying why
    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "did not finish within 3 s" in outcome.error
    assert time.monotonic() - started < 15
    # and neither the agent nor its child survives
    recorded = pids_in(pids)
    assert len(recorded) == 2
    assert not any(running(pid) for pid in recorded)


def test_a_stop_kills_the_agent_at_once(tmp_path: Path) -> None:
    # given a long-running agent that records its pid
    pids = tmp_path / "pids"
    command = agent_script(
        tmp_path,
        f"""
        import os, time
        record_pids({str(pids)!r}, os.getpid())
        time.sleep(60)
        """,
    )
    stop = threading.Event()
    job, _ = job_for(claim_for(), stop=stop)

    # when the runner stops it once it runs
    threading.Thread(target=lambda: wait_until(pids.exists) and stop.set(), daemon=True).start()
    outcome = provider(command).run(job)

    # then
    assert outcome == Failed(error="the runner stopped the agent", retryable=True)
    assert not running(pids_in(pids)[0])


def test_closing_the_provider_kills_the_agents_still_running(tmp_path: Path) -> None:
    # given an agent running in a thread, as in a runner exiting without waiting for it
    pids = tmp_path / "pids"
    command = agent_script(
        tmp_path,
        f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        record_pids({str(pids)!r}, os.getpid())
        time.sleep(60)
        """,
    )
    agents = provider(f"exec {command}")
    job, _ = job_for(claim_for())
    outcomes: list[object] = []
    thread = threading.Thread(target=lambda: outcomes.append(agents.run(job)))
    thread.start()
    assert wait_until(pids.exists)

    # when
    agents.close()

    # then the agent is gone at once
    thread.join(10)
    assert not running(pids_in(pids)[0])
    assert outcomes == [
        Failed(
            error="the agent command was killed by signal SIGKILL; stderr was empty",
            retryable=True,
        )
    ]


def test_what_an_agent_leaves_behind_after_exiting_is_ended_too(tmp_path: Path) -> None:
    # given an agent that starts a background process and exits at once, successfully
    pids = tmp_path / "pids"
    command = agent_script(
        tmp_path,
        f"""
        import subprocess, sys
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        record_pids({str(pids)!r}, child.pid)
        print('{{"done": true}}')
        """,
    )
    job, _ = job_for(claim_for())

    outcome = provider(command).run(job)

    assert outcome == Completed(result={"done": True}, output='{"done": true}\n')
    assert not running(pids_in(pids)[0])


def test_the_agent_learns_its_task_from_the_environment_but_not_the_key(tmp_path: Path) -> None:
    command = agent_script(
        tmp_path,
        """
        import json, os
        print(json.dumps({name: os.environ.get(name) for name in (
            "ZEROSHOT_TASK_ID", "ZEROSHOT_AGENT_ID", "ZEROSHOT_AGENT_ROLE", "ZEROSHOT_ITERATION",
            "ZEROSHOT_CLUSTER_ID", "ZEROSHOT_AGENT_MODEL", "ZEROSHOT_WEB_KEY", "KEPT")}))
        """,
    )
    job, _ = job_for(claim_for(iteration=3, model="opus"))
    environment = {"PATH": os.environ["PATH"], "ZEROSHOT_WEB_KEY": "secret", "KEPT": "yes"}

    outcome = provider(command, environment=environment).run(job)

    assert isinstance(outcome, Completed)
    assert outcome.result == {
        "ZEROSHOT_TASK_ID": "task_" + "a" * 32,
        "ZEROSHOT_AGENT_ID": "worker",
        "ZEROSHOT_AGENT_ROLE": "worker",
        "ZEROSHOT_ITERATION": "3",
        "ZEROSHOT_CLUSTER_ID": "c1",
        "ZEROSHOT_AGENT_MODEL": "opus",
        "ZEROSHOT_WEB_KEY": None,
        "KEPT": "yes",
    }


def test_a_command_killed_by_a_signal_says_which(tmp_path: Path) -> None:
    command = agent_script(tmp_path, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
    job, _ = job_for(claim_for())

    outcome = provider(f"exec {command}").run(job)

    assert isinstance(outcome, Failed)
    assert outcome.error.startswith("the agent command was killed by signal SIGKILL")
