"""Reading the agent CLIs' streaming JSON lines as they arrive, the way zeroshot's adapters do
(``src/agent-cli-provider/adapters/*-parser.ts`` and the adapters' ``parseEvent``).

One reader per run. ``feed`` takes one stdout line and returns the lines to show on the task's
output at once (the agent's text, ``→ tool input`` for a tool call, ``← output`` for its
result); ``output`` reads the whole run when it has ended: the agent's final text, the JSON
object in it, usage and cost, an error the CLI reported. ``session`` is the CLI's session id,
which output repair resumes. A line that is not a JSON object (a CLI's warning) is shown as is.

Pure: no processes, no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Protocol

from zeroshot_runner.records import JSON, Usage
from zeroshot_runner.results import AgentOutput, last_json_object, read_claude_envelope

# How much of a tool call's input or a tool's output one line shows.
TOOL_CHARS = 500


class StreamReader(Protocol):
    """Reads one run of one CLI."""

    session: str | None

    def feed(self, line: str) -> list[str]:
        """Read one stdout line; the lines to show now."""
        ...

    def output(self) -> AgentOutput:
        """The run, read, once the process has ended."""
        ...


class _Reader:
    """What every reader keeps: the session, the text shown so far, token counts."""

    cli = "agent"

    def __init__(self, *, model: str | None) -> None:
        self.session: str | None = None
        self.model = model
        self.texts: list[str] = []
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cost: float | None = None
        self.error: str | None = None
        self.ended = False

    def feed(self, line: str) -> list[str]:
        stripped = line.strip()
        if not stripped:
            return []
        try:
            event = json.loads(stripped)
        except ValueError:
            return [line]
        if not isinstance(event, dict):
            return [line]
        return self.event(event)

    def event(self, event: dict[str, JSON]) -> list[str]:
        raise NotImplementedError

    def output(self) -> AgentOutput:
        text = self.final_text()
        error = self.error
        if error is None and not self.ended:
            error = f"the {self.cli} CLI ended without its final event"
        return AgentOutput(
            text=text, result=last_json_object(text), usage=self.usage(), error=error
        )

    def final_text(self) -> str:
        return "\n".join(self.texts)

    def usage(self) -> Usage | None:
        if self.input_tokens is None and self.output_tokens is None and self.cost is None:
            return None
        return Usage(
            input_tokens=self.input_tokens or 0,
            output_tokens=self.output_tokens or 0,
            model=self.model,
            cost_usd=self.cost,
        )

    def count(self, input_tokens: JSON, output_tokens: JSON, cost: JSON = None) -> None:
        if _is_count(input_tokens):
            self.input_tokens = (self.input_tokens or 0) + int(input_tokens)
        if _is_count(output_tokens):
            self.output_tokens = (self.output_tokens or 0) + int(output_tokens)
        if _is_count(cost):
            self.cost = (self.cost or 0.0) + float(cost)

    def text(self, text: JSON) -> list[str]:
        if not isinstance(text, str) or not text:
            return []
        self.texts.append(text)
        return text.splitlines()


class ClaudeReader(_Reader):
    """``claude --print --output-format stream-json --verbose`` (or ``json``: one result line).

    Events: ``system`` (``init``, with ``session_id`` and ``model``), ``assistant`` (message
    content blocks: ``text``, ``tool_use``, ``thinking``), ``user`` (``tool_result`` blocks),
    and the final ``result`` envelope (``result`` text, ``structured_output`` under
    ``--json-schema``, ``usage``, ``total_cost_usd``, ``modelUsage``, ``is_error``).
    """

    cli = "claude"

    def __init__(self, *, model: str | None) -> None:
        super().__init__(model=model)
        self.envelope: dict[str, JSON] | None = None

    def event(self, event: dict[str, JSON]) -> list[str]:
        session = event.get("session_id")
        if isinstance(session, str) and session:
            self.session = session
        kind = event.get("type")
        message = event.get("message")
        blocks = message.get("content") if isinstance(message, Mapping) else None
        blocks = blocks if isinstance(blocks, list) else []
        shown: list[str] = []
        if kind == "system" and isinstance(event.get("model"), str):
            self.model = str(event["model"])
        elif kind == "assistant":
            for block in blocks:
                if not isinstance(block, Mapping):
                    continue
                if block.get("type") == "text":
                    shown += self.text(block.get("text"))
                elif block.get("type") == "tool_use":
                    shown.append(_call(block.get("name"), block.get("input")))
        elif kind == "user":
            for block in blocks:
                if isinstance(block, Mapping) and block.get("type") == "tool_result":
                    shown.append(_result(block.get("content"), block.get("is_error") is True))
        elif kind == "result":
            self.ended = True
            self.envelope = event
            if not self.texts:
                shown += list(_text_of(event.get("result")).splitlines())
        return shown

    def output(self) -> AgentOutput:
        if self.envelope is None:
            return super().output()
        read = read_claude_envelope(self.envelope)
        usage = read.usage
        if usage is not None and usage.model is None and self.model is not None:
            usage = Usage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                model=self.model,
                cost_usd=usage.cost_usd,
            )
        return AgentOutput(text=read.text, result=read.result, usage=usage, error=read.error)


class CodexReader(_Reader):
    """``codex exec --json``: ``thread.started`` (``thread_id``), ``turn.started``,
    ``item.started`` / ``item.completed`` (``agent_message``, ``reasoning``,
    ``command_execution``, ``file_change``, ``mcp_tool_call``; zeroshot's fixtures also use
    ``item.created`` with ``message``, ``function_call`` and ``function_call_output``),
    ``turn.completed`` (``usage``), ``turn.failed`` and ``error``.

    The final text is the last agent message; usage adds up the turns. Codex reports no cost.
    """

    cli = "codex"

    def event(self, event: dict[str, JSON]) -> list[str]:
        kind = event.get("type")
        if kind == "thread.started" and isinstance(event.get("thread_id"), str):
            self.session = str(event["thread_id"])
            return []
        if kind == "turn.completed":
            self.ended = True
            self.error = None
            usage = event.get("usage")
            if isinstance(usage, Mapping):
                self.count(usage.get("input_tokens"), usage.get("output_tokens"))
            return []
        if kind in ("turn.failed", "error"):
            detail = event.get("error")
            message = detail.get("message") if isinstance(detail, Mapping) else None
            message = message or event.get("message") or detail
            self.error = message if isinstance(message, str) else "the turn failed"
            return [f"✗ {self.error}"]
        item = event.get("item")
        if not isinstance(item, Mapping):
            return []
        item_type = item.get("type")
        if kind == "item.started":
            if item_type == "command_execution":
                return [_call("shell", item.get("command"))]
            return []
        if kind not in ("item.completed", "item.created"):
            return []
        if item_type == "agent_message":
            return self.text(item.get("text"))
        if item_type == "message" and item.get("role") == "assistant":
            content = item.get("content")
            parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
            joined = "".join(
                str(part.get("text") or "")
                for part in parts
                if isinstance(part, Mapping) and part.get("type") == "text"
            )
            return self.text(joined)
        if item_type == "command_execution":
            code = item.get("exit_code")
            failed = isinstance(code, int) and code != 0
            return [_result(item.get("aggregated_output"), failed)]
        if item_type == "function_call":
            return [_call(item.get("name"), item.get("arguments"))]
        if item_type == "function_call_output":
            return [_result(item.get("output"), bool(item.get("error")))]
        if item_type == "file_change":
            changes = item.get("changes")
            paths = [
                str(change.get("path"))
                for change in (changes if isinstance(changes, list) else [])
                if isinstance(change, Mapping)
            ]
            return [_call("edit", paths)]
        if item_type == "mcp_tool_call":
            return [_call(item.get("tool"), item.get("arguments"))]
        return []

    def final_text(self) -> str:
        return self.texts[-1] if self.texts else ""


class GeminiReader(_Reader):
    """``gemini --output-format stream-json``: ``init`` (``session_id``, ``model``), ``message``
    (``role``, ``content``, ``delta: true`` for a piece of a streamed answer), ``tool_use``,
    ``tool_result``, ``error`` (``severity``) and the final ``result`` (``status``, ``stats``
    with ``input_tokens``/``output_tokens``, or per model under ``stats.models``).

    The final text is every assistant message, joined. Gemini reports no cost.
    """

    cli = "gemini"

    def __init__(self, *, model: str | None) -> None:
        super().__init__(model=model)
        self.pieces: list[str] = []
        self.line = ""

    def event(self, event: dict[str, JSON]) -> list[str]:
        kind = event.get("type")
        if kind == "init":
            if isinstance(event.get("session_id"), str):
                self.session = str(event["session_id"])
            if isinstance(event.get("model"), str):
                self.model = str(event["model"])
            return []
        if kind == "message":
            if event.get("role") != "assistant":
                return []
            piece = _text_of(event.get("content"))
            self.pieces.append(piece)
            # Pieces arrive mid-line: whole lines are shown as they complete.
            self.line += piece
            *done, self.line = self.line.split("\n")
            return done
        shown = self._flush()
        if kind == "tool_use":
            name = event.get("tool_name") or event.get("name")
            return [*shown, _call(name, event.get("parameters") or event.get("input"))]
        if kind == "tool_result":
            failed = event.get("status") == "error"
            detail = event.get("error")
            content = event.get("output")
            if content is None and isinstance(detail, Mapping):
                content = detail.get("message")
            return [*shown, _result(content, failed)]
        if kind == "error":
            message = _text_of(event.get("message")) or "error"
            if event.get("severity") == "error":
                self.error = message
            return [*shown, f"✗ {message}"]
        if kind == "result":
            self.ended = True
            if event.get("status") not in (None, "success"):
                detail = event.get("error")
                failure = detail.get("message") if isinstance(detail, Mapping) else None
                self.error = failure if isinstance(failure, str) else "the run failed"
            stats = event.get("stats")
            if isinstance(stats, Mapping):
                self._count_stats(stats)
        return shown

    def _count_stats(self, stats: Mapping[str, JSON]) -> None:
        if _is_count(stats.get("input_tokens")) or _is_count(stats.get("output_tokens")):
            self.count(stats.get("input_tokens"), stats.get("output_tokens"))
            return
        models = stats.get("models")
        if not isinstance(models, Mapping):
            return
        if _is_count(models.get("input_tokens")):
            # zeroshot's fixture: one set of counts directly under ``models``.
            self.count(models.get("input_tokens"), models.get("output_tokens"))
            return
        for name, counts in models.items():
            tokens = counts.get("tokens") if isinstance(counts, Mapping) else None
            if isinstance(tokens, Mapping):
                self.count(
                    tokens.get("prompt", tokens.get("input")),
                    tokens.get("candidates", tokens.get("output")),
                )
                self.model = self.model or name

    def _flush(self) -> list[str]:
        line, self.line = self.line, ""
        return [line] if line else []

    def output(self) -> AgentOutput:
        self.texts = ["".join(self.pieces)] if self.pieces else []
        return super().output()


class OpencodeReader(_Reader):
    """``opencode run --format json``: events with ``type`` ``step_start``, ``text``,
    ``tool_use``, ``step_finish`` (each carrying its ``part``) or ``error``, and
    ``message.part.updated`` (``properties.part``); every event names its ``sessionID``.

    Parts: ``text``, ``reasoning``, ``tool`` (``state.status`` pending/running/completed/error,
    ``state.input``, ``state.output``), ``step-finish`` (``tokens.input``, ``tokens.output``,
    ``cost``). The final text is every text part, joined; usage and cost add up the steps.
    """

    cli = "opencode"

    def __init__(self, *, model: str | None) -> None:
        super().__init__(model=model)
        self.calls: set[str] = set()

    def event(self, event: dict[str, JSON]) -> list[str]:
        session = event.get("sessionID") or event.get("sessionId")
        if isinstance(session, str) and session:
            self.session = session
        kind = event.get("type")
        if kind == "error":
            detail = event.get("error")
            detail = detail if isinstance(detail, Mapping) else {}
            data = detail.get("data")
            message = (
                (data.get("message") if isinstance(data, Mapping) else None)
                or detail.get("message")
                or detail.get("name")
                or "Unknown error"
            )
            self.error = str(message)
            return [f"✗ {self.error}"]
        if kind == "message.part.updated":
            properties = event.get("properties")
            part = properties.get("part") if isinstance(properties, Mapping) else None
        else:
            part = event.get("part", event)
        return self._part(part) if isinstance(part, Mapping) else []

    def _part(self, part: Mapping[str, JSON]) -> list[str]:
        kind = part.get("type")
        if kind == "text":
            return self.text(part.get("text"))
        if kind == "step-finish":
            self.ended = True
            tokens = part.get("tokens")
            tokens = tokens if isinstance(tokens, Mapping) else {}
            self.count(tokens.get("input"), tokens.get("output"), part.get("cost"))
            return []
        if kind != "tool":
            return []
        state = part.get("state")
        state = state if isinstance(state, Mapping) else {}
        status = state.get("status")
        call_id = str(part.get("callID") or part.get("id") or "")
        shown = []
        if status in ("pending", "running", "completed", "error") and call_id not in self.calls:
            self.calls.add(call_id)
            shown.append(_call(part.get("tool"), state.get("input")))
        if status == "completed":
            shown.append(_result(state.get("output"), False))
        elif status == "error":
            shown.append(_result(state.get("error"), True))
        return shown


def _call(name: JSON, given: JSON) -> str:
    shown = given if isinstance(given, str) else json.dumps(given, ensure_ascii=False)
    return f"→ {name or 'tool'} {_one_line(shown)}".rstrip()


def _result(content: JSON, failed: bool) -> str:
    return f"← {'error: ' if failed else ''}{_one_line(_text_of(content))}".rstrip()


def _text_of(value: JSON) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        # Content blocks: [{"type": "text", "text": …}, …]
        return "".join(
            str(item.get("text") or "") if isinstance(item, Mapping) else str(item)
            for item in value
        )
    return json.dumps(value, ensure_ascii=False)


def _one_line(text: str) -> str:
    flat = " ⏎ ".join(part for part in text.strip().splitlines() if part.strip())
    return flat if len(flat) <= TOOL_CHARS else f"{flat[:TOOL_CHARS]}…"


def _is_count(value: JSON) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
