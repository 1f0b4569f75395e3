"""The named providers: the agent CLIs teams use, each run the way zeroshot's adapters run it
(``src/agent-cli-provider/adapters/``): ``claude``, ``codex``, ``gemini``, ``opencode``.

An adapter knows its CLI's non-interactive command line (model, reasoning effort, schema,
resuming a session, unattended mode) and its stream reader (``streams.py``). The agent's model
is its ``model`` when it has one, else its ``modelLevel`` (``level1``..``level3``, default
``level2``) looked up in the runner's model table (``models.json``, zeroshot's defaults; a
``--models FILE`` of the same shape replaces entries); ``reasoningEffort`` likewise.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from zeroshot_runner.providers.base import Job
from zeroshot_runner.providers.streams import (
    ClaudeReader,
    CodexReader,
    GeminiReader,
    OpencodeReader,
    StreamReader,
)
from zeroshot_runner.records import JSON, AgentSpec, Failed, Outcome
from zeroshot_runner.repair import Repair, Reply, agent_schema, run_with_repair

DEFAULT_MODELS = Path(__file__).with_name("models.json")
LEVELS = ("level1", "level2", "level3")
EFFORTS = frozenset({"low", "medium", "high", "xhigh", "max"})
# A prompt longer than this goes on stdin, not on the command line: Linux refuses one
# argument over 128 KiB.
MAX_ARGUMENT_BYTES = 100_000
_STDIN_POINTER = "Follow the instructions given on standard input."
# Model names (``sonnet``, ``gpt-5.4``, ``openrouter/anthropic/claude-sonnet-4``, ``model:tag``)
# and session ids: no leading dash, no spaces or control characters.
_SAFE_ARGUMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/@+=-]{0,199}")


class ModelTableError(ValueError):
    """The model table file cannot be read or does not have the documented shape."""


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """What an agent runs on: a model (``None``: the CLI's own default) and reasoning effort."""

    level: str
    model: str | None
    effort: str | None


@dataclass(frozen=True, slots=True)
class LevelSpec:
    model: str | None = None
    effort: str | None = None


@dataclass(frozen=True, slots=True)
class ProviderModels:
    default_level: str
    levels: Mapping[str, LevelSpec]


@dataclass(frozen=True, slots=True)
class ModelTable:
    """zeroshot's model levels per provider."""

    providers: Mapping[str, ProviderModels]

    @classmethod
    def load(cls, override: Path | None = None) -> ModelTable:
        """The defaults, with a file's entries (same shape) replacing theirs; ModelTableError."""
        table = _table_from_json(_read(DEFAULT_MODELS), source=str(DEFAULT_MODELS))
        if override is None:
            return table
        extra = _table_from_json(_read(override), source=str(override))
        merged = dict(table.providers)
        for name, models in extra.providers.items():
            base = merged.get(name)
            levels = {**(base.levels if base else {}), **models.levels}
            merged[name] = ProviderModels(default_level=models.default_level, levels=levels)
        return cls(providers=merged)

    def choose(self, provider: str, agent: AgentSpec) -> ModelChoice:
        """The model and effort for ``agent`` on ``provider``."""
        models = self.providers.get(provider) or ProviderModels("level2", {})
        asked = agent.config.get("modelLevel")
        level = asked if isinstance(asked, str) and asked in LEVELS else models.default_level
        spec = models.levels.get(level, LevelSpec())
        effort = agent.config.get("reasoningEffort")
        return ModelChoice(
            level=level,
            # zeroshot keeps an explicit model as the provider-specific escape hatch.
            model=agent.model or spec.model,
            effort=effort if isinstance(effort, str) and effort in EFFORTS else spec.effort,
        )


@dataclass(frozen=True, slots=True)
class Invocation:
    """One run of a CLI: its argument vector and what goes to its stdin."""

    argv: tuple[str, ...]
    stdin: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """What one run asks of the CLI."""

    prompt: str
    choice: ModelChoice
    schema: Mapping[str, JSON] | None
    strict: bool
    session: str | None
    auto_approve: bool


class Adapter(Protocol):
    """One agent CLI."""

    @property
    def name(self) -> str:
        """The provider's name (zeroshot's)."""
        ...

    @property
    def resumes(self) -> bool:
        """Whether a run can go on in an earlier run's session (output repair uses it)."""
        ...

    def invocation(self, request: Request) -> Invocation:
        """The command line of one run."""
        ...

    def reader(self, choice: ModelChoice) -> StreamReader:
        """A reader of one run's stdout."""
        ...


@dataclass(frozen=True, slots=True)
class ClaudeAdapter:
    """``claude --print``: prompt on stdin; ``stream-json`` (with ``--verbose``), or ``json``
    with ``--json-schema`` when the agent's ``strictSchema`` asks for native enforcement."""

    name: str = "claude"
    binary: str = "claude"
    resumes: bool = True

    def invocation(self, request: Request) -> Invocation:
        native = request.schema is not None and request.strict
        argv = [self.binary, "--print", "--input-format", "text"]
        if native:
            argv += ["--output-format", "json", "--json-schema", json.dumps(request.schema)]
        else:
            argv += ["--output-format", "stream-json", "--verbose"]
        if request.choice.model:
            argv += ["--model", request.choice.model]
        if request.choice.effort:
            argv += ["--effort", request.choice.effort]
        if request.auto_approve:
            argv.append("--dangerously-skip-permissions")
        if request.session:
            argv += ["--resume", request.session]
        prompt = request.prompt
        if request.schema is not None and not native:
            prompt = with_schema(prompt, request.schema)
        return Invocation(argv=tuple(argv), stdin=prompt)

    def reader(self, choice: ModelChoice) -> StreamReader:
        return ClaudeReader(model=choice.model)


@dataclass(frozen=True, slots=True)
class CodexAdapter:
    """``codex exec --json … -``: prompt on stdin; ``exec resume <thread>`` for a repair."""

    name: str = "codex"
    binary: str = "codex"
    resumes: bool = True

    def invocation(self, request: Request) -> Invocation:
        argv = [self.binary, "exec"]
        if request.auto_approve:
            # Before `resume`: codex parses --sandbox on `exec`, not on its subcommand.
            argv += ["--sandbox", "workspace-write", "--config", 'approval_policy="never"']
        if request.session:
            argv.append("resume")
        argv.append("--json")
        if request.choice.model:
            argv += ["-m", request.choice.model]
        if request.choice.effort:
            argv += ["--config", f'model_reasoning_effort="{request.choice.effort}"']
        argv.append("--skip-git-repo-check")
        if request.session:
            argv.append(request.session)
        argv.append("-")
        prompt = request.prompt
        if request.schema is not None:
            prompt = with_schema(prompt, request.schema)
        return Invocation(argv=tuple(argv), stdin=prompt)

    def reader(self, choice: ModelChoice) -> StreamReader:
        return CodexReader(model=choice.model)


@dataclass(frozen=True, slots=True)
class GeminiAdapter:
    """``gemini --output-format stream-json --prompt=PROMPT``; no session to resume."""

    name: str = "gemini"
    binary: str = "gemini"
    resumes: bool = False

    def invocation(self, request: Request) -> Invocation:
        argv = [self.binary, "--output-format", "stream-json"]
        if request.choice.model:
            argv += ["-m", request.choice.model]
        if request.auto_approve:
            argv.append("--yolo")
        prompt = request.prompt
        if request.schema is not None:
            prompt = with_schema(prompt, request.schema)
        argument, stdin = _prompt_argument(prompt)
        # "--prompt=…" keeps a prompt that starts with "-" from being read as an option.
        return Invocation(argv=(*argv, f"--prompt={argument}"), stdin=stdin)

    def reader(self, choice: ModelChoice) -> StreamReader:
        return GeminiReader(model=choice.model)


@dataclass(frozen=True, slots=True)
class OpencodeAdapter:
    """``opencode run --format json [--session ID] -- PROMPT``; effort as ``--variant``."""

    name: str = "opencode"
    binary: str = "opencode"
    resumes: bool = True

    def invocation(self, request: Request) -> Invocation:
        argv = [self.binary, "run", "--format", "json"]
        if request.choice.model:
            argv += ["--model", request.choice.model]
        if request.choice.effort:
            argv += ["--variant", request.choice.effort]
        if request.session:
            argv += ["--session", request.session]
        prompt = request.prompt
        if request.schema is not None:
            prompt = with_schema(prompt, request.schema)
        argument, stdin = _prompt_argument(prompt)
        # After "--" a prompt that starts with "-" is not read as an option.
        return Invocation(argv=(*argv, "--", argument), stdin=stdin)

    def reader(self, choice: ModelChoice) -> StreamReader:
        return OpencodeReader(model=choice.model)


ADAPTERS: Mapping[str, Adapter] = {
    adapter.name: adapter
    for adapter in (ClaudeAdapter(), CodexAdapter(), GeminiAdapter(), OpencodeAdapter())
}


class Execute(Protocol):
    """Runs one process to its end (``CommandProvider.execute``)."""

    def __call__(
        self, job: Job, argv: tuple[str, ...], *, stdin: str, on_line: Callable[[str], None]
    ) -> str | Failed: ...


@dataclass(frozen=True, slots=True)
class AgentCli:
    """Runs one task's agent through a named CLI, with output repair in its own session."""

    adapter: Adapter
    models: ModelTable
    auto_approve: bool = False

    def run(self, job: Job, execute: Execute) -> Outcome:
        """Run the agent (and its repair, if needed) through ``execute``."""
        agent = job.claim.agent
        choice = self.models.choose(self.adapter.name, agent)
        if choice.model is not None and not is_safe_argument(choice.model):
            # The agent's config is tenant text: it never becomes an option of the CLI.
            return Failed(
                error=f"agent {agent.id}'s model {choice.model[:80]!r} is not a model name",
                retryable=False,
            )
        schema = agent_schema(agent) if agent.wants_json else None
        strict = agent.config.get("strictSchema", True) is not False
        job.emit(
            f"[zeroshot-runner] {self.adapter.name}: model {choice.model or '(the CLI default)'}"
            f", {choice.level}" + (f", effort {choice.effort}" if choice.effort else "")
        )

        def attempt(repair: Repair | None) -> Reply | Failed:
            session = None
            if repair is not None and self.adapter.resumes:
                found = repair.previous.session
                session = found if found is not None and is_safe_argument(found) else None
            if repair is None:
                prompt = job.claim.prompt
            elif session is not None:
                prompt = repair.prompt
            else:
                # No session to go back to: the task again, the wrong answer, what is wrong.
                prompt = (
                    f"{job.claim.prompt}\n\nYour previous answer was:\n"
                    f"{repair.previous.read.text}\n\n{repair.prompt}"
                )
            invocation = self.adapter.invocation(
                Request(
                    prompt=prompt,
                    choice=choice,
                    schema=schema,
                    strict=strict,
                    session=session,
                    auto_approve=self.auto_approve,
                )
            )
            reader = self.adapter.reader(choice)

            def on_line(line: str) -> None:
                for shown in reader.feed(line):
                    job.emit(shown)

            ran = execute(job, invocation.argv, stdin=invocation.stdin, on_line=on_line)
            if isinstance(ran, Failed):
                return ran
            return Reply(read=reader.output(), session=reader.session)

        return run_with_repair(job, attempt)


def is_safe_argument(value: str) -> bool:
    """Whether a model name or session id may go on a command line as an option's value."""
    return bool(_SAFE_ARGUMENT.fullmatch(value))


def with_schema(prompt: str, schema: Mapping[str, JSON]) -> str:
    """zeroshot's ``appendJsonSchemaPrompt``: the schema, for CLIs that cannot enforce one."""
    return (
        f"{prompt}\n\n## OUTPUT FORMAT (CRITICAL - REQUIRED)\n\n"
        "You MUST respond with a JSON object that exactly matches this schema. NO markdown, "
        "NO explanation, NO code blocks. ONLY the raw JSON object.\n\n"
        f"Schema:\n```json\n{json.dumps(schema, indent=2, ensure_ascii=False)}\n```\n\n"
        "Your response must be ONLY valid JSON. Start with { and end with }. Nothing else."
    )


def _prompt_argument(prompt: str) -> tuple[str, str]:
    if len(prompt.encode("utf-8")) <= MAX_ARGUMENT_BYTES:
        return prompt, ""
    # Both CLIs append what they read on stdin to the prompt argument.
    return _STDIN_POINTER, prompt


def _read(path: Path) -> JSON:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelTableError(f"{path}: {error}") from error


def _table_from_json(data: JSON, *, source: str) -> ModelTable:
    if not isinstance(data, dict):
        raise ModelTableError(f"{source}: must be an object keyed by provider name")
    providers = {}
    for name, entry in data.items():
        where = f"{source}: {name}"
        if not isinstance(entry, dict):
            raise ModelTableError(f"{where}: must be an object")
        default = entry.get("defaultLevel", "level2")
        if default not in LEVELS:
            raise ModelTableError(f"{where}.defaultLevel: must be one of {', '.join(LEVELS)}")
        levels = entry.get("levels", {})
        if not isinstance(levels, dict) or not set(levels) <= set(LEVELS):
            raise ModelTableError(f"{where}.levels: must be an object keyed by level1..level3")
        specs = {}
        for level, spec in levels.items():
            if not isinstance(spec, dict):
                raise ModelTableError(f"{where}.levels.{level}: must be an object")
            model, effort = spec.get("model"), spec.get("reasoningEffort")
            if model is not None and not (isinstance(model, str) and model):
                raise ModelTableError(f"{where}.levels.{level}.model: must be a name or null")
            if effort is not None and effort not in EFFORTS:
                raise ModelTableError(
                    f"{where}.levels.{level}.reasoningEffort: one of {', '.join(sorted(EFFORTS))}"
                )
            specs[level] = LevelSpec(model=model, effort=effort)
        providers[name] = ProviderModels(default_level=default, levels=specs)
    return ModelTable(providers=providers)
