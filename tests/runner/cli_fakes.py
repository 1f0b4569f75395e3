"""Fake agent CLIs for the runner's tests: executables named ``claude``, ``codex``, ``gemini``
and ``opencode`` put on ``PATH``, which print exactly the stream format the real CLI prints.

Each call appends ``{"argv", "stdin", "cwd"}`` to a log (JSON lines) and answers with the next
of its answers (the last one again once they run out), wrapped in its CLI's stream. Where the
shapes come from:

- ``claude --print --output-format stream-json --verbose``: Claude Code's CLI reference
  ("Output formats": ``system``/``init``, ``assistant`` and ``user`` messages with content
  blocks, the final ``result`` with ``total_cost_usd``, ``usage``, ``modelUsage``,
  ``session_id``), as zeroshot reads them in ``src/agent-cli-provider/adapters/claude-parser.ts``
  and its tests (``tests/output-extraction.test.js``); ``--output-format json`` prints the
  ``result`` envelope alone, with ``structured_output`` under ``--json-schema``.
- ``codex exec --json``: Codex's ``docs/exec.md`` (``thread.started``, ``turn.started``,
  ``item.started``/``item.completed`` with ``reasoning``, ``command_execution``,
  ``agent_message`` items, ``turn.completed`` with ``usage``), as zeroshot's
  ``codex-parser.ts`` reads them (fixtures ``tests/fixtures/codex/*.jsonl``).
- ``gemini --output-format stream-json``: gemini-cli's ``docs/cli/headless.md`` (``init``,
  ``message`` with ``delta``, ``tool_use``, ``tool_result``, ``result`` with ``stats``), as
  zeroshot's ``adapters/gemini.ts`` reads them (fixtures ``tests/fixtures/gemini/*.jsonl``).
- ``opencode run --format json``: events ``step_start``, ``tool_use``, ``text``,
  ``step_finish`` each carrying a ``part`` and the ``sessionID``, the step's ``tokens`` and
  ``cost``, as zeroshot's ``adapters/opencode.ts`` reads them (its
  ``tests/opencode-output-parser.test.js`` and ``tests/provider-cli-builder.test.js``).
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

SESSIONS = {
    "claude": "3f1c2b8e-claude-session",
    "codex": "0199a213-81c0-7800-8aa1-bbab2a035a53",
    "gemini": "gemini-session-7",
    "opencode": "ses_5a1b2c3d4e",
}

_FAKE = r"""
import json, os, sys

LOG = {log!r}
ANSWERS = {answers!r}
NAME = {name!r}
SESSION = {session!r}

stdin = sys.stdin.read()
argv = sys.argv[1:]
calls = 0
if os.path.exists(LOG):
    with open(LOG, encoding="utf-8") as file:
        calls = sum(1 for _ in file)
with open(LOG, "a", encoding="utf-8") as file:
    file.write(json.dumps({{"argv": argv, "stdin": stdin, "cwd": os.getcwd()}}) + "\n")
answer = ANSWERS[min(calls, len(ANSWERS) - 1)]


def out(event):
    print(json.dumps(event), flush=True)


def option(flag):
    for given in argv:
        if given.startswith(flag + "="):
            return given[len(flag) + 1:]
    return argv[argv.index(flag) + 1] if flag in argv else None


if NAME == "claude":
    aliases = {{"haiku": "claude-haiku-4-5", "sonnet": "claude-sonnet-4-5",
               "opus": "claude-opus-4-5"}}
    model = aliases.get(option("--model"), option("--model") or "claude-sonnet-4-5")
    envelope = {{
        "type": "result", "subtype": "success", "is_error": False, "duration_ms": 2500,
        "duration_api_ms": 2300, "num_turns": 2, "result": answer, "session_id": SESSION,
        "total_cost_usd": 0.0123,
        "usage": {{"input_tokens": 120, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": 0, "output_tokens": 45}},
        "modelUsage": {{model: {{"inputTokens": 120, "outputTokens": 45, "costUSD": 0.0123}}}},
        "permission_denials": [], "uuid": "0b7c0e0e-result",
    }}
    if option("--output-format") == "json":
        if "--json-schema" in argv:
            try:
                envelope["structured_output"] = json.loads(answer)
            except ValueError:
                pass
        out(envelope)
        sys.exit(0)
    out({{"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": SESSION,
         "tools": ["Bash", "Read", "Edit"], "model": model, "permissionMode": "default"}})
    out({{"type": "assistant", "session_id": SESSION, "parent_tool_use_id": None,
         "message": {{"id": "msg_01", "type": "message", "role": "assistant", "model": model,
                     "content": [{{"type": "text", "text": "Reading the file."}},
                                 {{"type": "tool_use", "id": "toolu_01", "name": "Read",
                                  "input": {{"file_path": "README.md"}}}}],
                     "stop_reason": None, "usage": {{"input_tokens": 60, "output_tokens": 20}}}}}})
    out({{"type": "user", "session_id": SESSION, "parent_tool_use_id": None,
         "message": {{"role": "user", "content": [{{"tool_use_id": "toolu_01",
                     "type": "tool_result", "content": "# Demo\nline two"}}]}}}})
    out({{"type": "assistant", "session_id": SESSION, "parent_tool_use_id": None,
         "message": {{"id": "msg_02", "type": "message", "role": "assistant", "model": model,
                     "content": [{{"type": "text", "text": answer}}], "stop_reason": "end_turn",
                     "usage": {{"input_tokens": 60, "output_tokens": 25}}}}}})
    out(envelope)
elif NAME == "codex":
    if "resume" not in argv:
        out({{"type": "thread.started", "thread_id": SESSION}})
    out({{"type": "turn.started"}})
    out({{"type": "item.completed", "item": {{"id": "item_0", "type": "reasoning",
         "text": "**Reading the file**"}}}})
    command = "bash -lc 'cat README.md'"
    out({{"type": "item.started", "item": {{"id": "item_1", "type": "command_execution",
         "command": command, "aggregated_output": "", "exit_code": None,
         "status": "in_progress"}}}})
    out({{"type": "item.completed", "item": {{"id": "item_1", "type": "command_execution",
         "command": command, "aggregated_output": "# Demo\n", "exit_code": 0,
         "status": "completed"}}}})
    out({{"type": "item.completed", "item": {{"id": "item_2", "type": "agent_message",
         "text": answer}}}})
    out({{"type": "turn.completed", "usage": {{"input_tokens": 24763,
         "cached_input_tokens": 24448, "output_tokens": 122}}}})
elif NAME == "gemini":
    model = option("-m") or "gemini-2.5-flash"
    stamp = "2025-10-10T12:00:00.000Z"
    out({{"type": "init", "timestamp": stamp, "session_id": SESSION, "model": model}})
    out({{"type": "message", "timestamp": stamp, "role": "user", "content": option("--prompt")}})
    out({{"type": "tool_use", "timestamp": stamp, "tool_name": "read_file",
         "tool_id": "read_file-1", "parameters": {{"file_path": "README.md"}}}})
    out({{"type": "tool_result", "timestamp": stamp, "tool_id": "read_file-1",
         "status": "success", "output": "# Demo"}})
    half = len(answer) // 2
    out({{"type": "message", "timestamp": stamp, "role": "assistant",
         "content": answer[:half], "delta": True}})
    out({{"type": "message", "timestamp": stamp, "role": "assistant",
         "content": answer[half:], "delta": True}})
    out({{"type": "result", "timestamp": stamp, "status": "success",
         "stats": {{"total_tokens": 250, "input_tokens": 200, "output_tokens": 50,
                   "duration_ms": 3000, "tool_calls": 1}}}})
elif NAME == "opencode":
    stamp = 1760097600000
    base = {{"timestamp": stamp, "sessionID": SESSION}}
    out({{**base, "type": "step_start", "part": {{"id": "prt_1", "sessionID": SESSION,
         "messageID": "msg_1", "type": "step-start"}}}})
    out({{**base, "type": "tool_use", "part": {{"id": "prt_2", "sessionID": SESSION,
         "messageID": "msg_1", "type": "tool", "callID": "call_1", "tool": "read",
         "state": {{"status": "completed", "input": {{"filePath": "README.md"}},
                   "output": "# Demo", "title": "README.md", "metadata": {{}}}}}}}})
    out({{**base, "type": "step_finish", "part": {{"id": "prt_3", "type": "step-finish",
         "reason": "tool-calls", "cost": 0.001,
         "tokens": {{"input": 300, "output": 20, "reasoning": 0,
                    "cache": {{"read": 0, "write": 0}}}}}}}})
    out({{**base, "type": "step_start", "part": {{"id": "prt_4", "type": "step-start"}}}})
    out({{**base, "type": "text", "part": {{"id": "prt_5", "sessionID": SESSION,
         "messageID": "msg_2", "type": "text", "text": answer,
         "time": {{"start": stamp, "end": stamp}}}}}})
    out({{**base, "type": "step_finish", "part": {{"id": "prt_6", "type": "step-finish",
         "reason": "stop", "cost": 0.0011,
         "tokens": {{"input": 320, "output": 40, "reasoning": 0,
                    "cache": {{"read": 0, "write": 0}}}}}}}})
"""


def install_fake_cli(bin_dir: Path, name: str, answers: list[str], log: Path) -> Path:
    """Write an executable ``name`` into ``bin_dir`` that answers ``answers`` in turn."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    source = _FAKE.format(log=str(log), answers=answers, name=name, session=SESSIONS[name])
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(source), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def calls_in(log: Path) -> list[dict[str, Any]]:
    """The calls a fake CLI logged."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def path_with(bin_dir: Path) -> str:
    """``PATH`` with ``bin_dir`` first."""
    return f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
