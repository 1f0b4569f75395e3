"""The named providers (claude, codex, gemini, opencode) against fake CLIs on PATH that print
the real CLIs' stream formats (tests/runner/cli_fakes.py says where each shape comes from)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.runner.cli_fakes import SESSIONS, calls_in, install_fake_cli, path_with
from tests.runner.helpers import claim_for, job_for
from zeroshot_runner.providers.agent_cli import ADAPTERS, AgentCli, ModelTable, ModelTableError
from zeroshot_runner.providers.command import CommandProvider
from zeroshot_runner.records import Completed, Failed, Usage

ANSWER = '{"summary": "done", "result": "ok"}'
SCHEMA = {
    "type": "object",
    "required": ["summary", "result"],
    "properties": {"summary": {"type": "string"}, "result": {"type": "string"}},
}


def provider_for(
    name: str, tmp_path: Path, answers: list[str], **options: Any
) -> tuple[CommandProvider, Path]:
    log = tmp_path / f"{name}.calls"
    bin_dir = tmp_path / "bin"
    install_fake_cli(bin_dir, name, answers, log)
    provider = CommandProvider(
        default_timeout=30.0,
        environment={"PATH": path_with(bin_dir), "HOME": str(tmp_path)},
        agent_cli=AgentCli(adapter=ADAPTERS[name], models=ModelTable.load(), **options),
    )
    return provider, log


def test_claude_streams_its_events_and_reads_result_usage_cost_and_model(tmp_path: Path) -> None:
    # given an agent at zeroshot's level1, whose result is not held to a native schema
    provider, log = provider_for("claude", tmp_path, [ANSWER])
    job, lines = job_for(claim_for(prompt="Fix the bug.", modelLevel="level1"))

    # when
    outcome = provider.run(job)

    # then the CLI ran non-interactively on level1's model, with the prompt on stdin
    ((call,),) = [calls_in(log)]
    argv = call["argv"]
    assert argv[:4] == ["--print", "--input-format", "text", "--output-format"]
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert "--verbose" in argv
    assert argv[argv.index("--model") + 1] == "haiku"
    assert call["stdin"] == "Fix the bug."
    assert "--dangerously-skip-permissions" not in argv
    # and its result, usage and cost come from the result event, the model from modelUsage
    assert outcome == Completed(
        result={"summary": "done", "result": "ok"},
        output=ANSWER,
        usage=Usage(input_tokens=120, output_tokens=45, model="claude-haiku-4-5", cost_usd=0.0123),
    )
    # and the text, the tool call and its result streamed as they came
    assert lines.lines == [
        "[zeroshot-runner] claude: model haiku, level1",
        "Reading the file.",
        '→ Read {"file_path": "README.md"}',
        "← # Demo ⏎ line two",
        ANSWER,
    ]


def test_claude_enforces_a_strict_schema_natively_and_passes_effort(tmp_path: Path) -> None:
    provider, log = provider_for("claude", tmp_path, [ANSWER], auto_approve=True)
    job, _ = job_for(
        claim_for(model="opus", reasoningEffort="high", jsonSchema=SCHEMA, strictSchema=True)
    )

    outcome = provider.run(job)

    argv = calls_in(log)[0]["argv"]
    assert argv[argv.index("--output-format") + 1] == "json"
    assert json.loads(argv[argv.index("--json-schema") + 1]) == SCHEMA
    assert argv[argv.index("--model") + 1] == "opus"
    assert argv[argv.index("--effort") + 1] == "high"
    assert "--dangerously-skip-permissions" in argv
    assert isinstance(outcome, Completed)
    assert outcome.result == {"summary": "done", "result": "ok"}


def test_without_strict_schema_claude_streams_and_the_schema_goes_in_the_prompt(
    tmp_path: Path,
) -> None:
    provider, log = provider_for("claude", tmp_path, [ANSWER])
    job, _ = job_for(claim_for(prompt="Plan.", jsonSchema=SCHEMA, strictSchema=False))

    provider.run(job)

    call = calls_in(log)[0]
    assert "--json-schema" not in call["argv"]
    assert call["stdin"].startswith("Plan.\n\n## OUTPUT FORMAT")
    assert '"required": [' in call["stdin"]


def test_codex_streams_its_events_and_reads_result_usage_and_model(tmp_path: Path) -> None:
    # given an agent at level3, in a workspace
    provider, log = provider_for("codex", tmp_path, [ANSWER])
    job, lines = job_for(claim_for(prompt="Fix it.", modelLevel="level3"))
    job = type(job)(claim=job.claim, emit=job.emit, stop=job.stop, workdir=tmp_path)

    outcome = provider.run(job)

    # then codex exec ran with level3's model and effort, reading the prompt from stdin
    call = calls_in(log)[0]
    argv = call["argv"]
    assert argv[0] == "exec"
    assert argv[-1] == "-"
    assert "--json" in argv
    assert argv[argv.index("-m") + 1] == "gpt-5.4"
    assert 'model_reasoning_effort="xhigh"' in argv
    assert call["stdin"] == "Fix it."
    assert call["cwd"] == str(tmp_path)
    # and the result is the last agent message; usage from turn.completed; no cost reported
    assert outcome == Completed(
        result={"summary": "done", "result": "ok"},
        output=ANSWER,
        usage=Usage(input_tokens=24763, output_tokens=122, model="gpt-5.4", cost_usd=None),
    )
    assert lines.lines == [
        "[zeroshot-runner] codex: model gpt-5.4, level3, effort xhigh",
        "→ shell bash -lc 'cat README.md'",
        "← # Demo",
        ANSWER,
    ]


def test_gemini_streams_its_events_and_reads_result_usage_and_model(tmp_path: Path) -> None:
    # given an agent with an explicit model (gemini's levels name none: the CLI's default)
    provider, log = provider_for("gemini", tmp_path, [ANSWER + "\nAll set."])
    job, lines = job_for(claim_for(prompt="Fix it.", model="gemini-2.5-pro"))

    outcome = provider.run(job)

    argv = calls_in(log)[0]["argv"]
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert argv[argv.index("-m") + 1] == "gemini-2.5-pro"
    assert argv[-1] == "--prompt=Fix it."
    # the answer came in two pieces, cut mid-line: shown as whole lines
    assert outcome == Completed(
        result={"summary": "done", "result": "ok"},
        output=ANSWER + "\nAll set.",
        usage=Usage(input_tokens=200, output_tokens=50, model="gemini-2.5-pro", cost_usd=None),
    )
    assert lines.lines == [
        "[zeroshot-runner] gemini: model gemini-2.5-pro, level2",
        '→ read_file {"file_path": "README.md"}',
        "← # Demo",
        ANSWER,
        "All set.",
    ]


def test_gemini_without_a_model_leaves_the_choice_to_the_cli(tmp_path: Path) -> None:
    provider, log = provider_for("gemini", tmp_path, [ANSWER])
    job, _ = job_for(claim_for(modelLevel="level3"))

    outcome = provider.run(job)

    assert "-m" not in calls_in(log)[0]["argv"]
    # the init event names the model the CLI picked
    assert isinstance(outcome, Completed)
    assert outcome.usage is not None
    assert outcome.usage.model == "gemini-2.5-flash"


def test_opencode_streams_its_events_and_reads_result_usage_cost_and_model(
    tmp_path: Path,
) -> None:
    provider, log = provider_for("opencode", tmp_path, [ANSWER])
    job, lines = job_for(claim_for(prompt="Fix it.", model="openai/gpt-5.2", modelLevel="level3"))

    outcome = provider.run(job)

    argv = calls_in(log)[0]["argv"]
    assert argv[:3] == ["run", "--format", "json"]
    assert argv[argv.index("--model") + 1] == "openai/gpt-5.2"
    assert argv[argv.index("--variant") + 1] == "high"
    assert argv[-2:] == ["--", "Fix it."]
    # usage and cost add up both steps
    assert isinstance(outcome, Completed)
    assert outcome.result == {"summary": "done", "result": "ok"}
    assert outcome.usage == Usage(
        input_tokens=620, output_tokens=60, model="openai/gpt-5.2", cost_usd=pytest.approx(0.0021)
    )
    assert lines.lines == [
        "[zeroshot-runner] opencode: model openai/gpt-5.2, level3, effort high",
        '→ read {"filePath": "README.md"}',
        "← # Demo",
        ANSWER,
    ]


@pytest.mark.parametrize("name", ["claude", "codex", "opencode"])
def test_a_bad_answer_is_repaired_in_the_clis_own_session(tmp_path: Path, name: str) -> None:
    # given an agent whose first answer is not JSON and whose second is
    provider, log = provider_for(name, tmp_path, ["I fixed it, all good.", ANSWER])
    job, lines = job_for(claim_for(prompt="Fix it."))

    outcome = provider.run(job)

    # then the task completes, one repair counted, asked in the first run's session
    assert isinstance(outcome, Completed)
    assert outcome.result == {"summary": "done", "result": "ok"}
    assert outcome.repairs == 1
    first, second = calls_in(log)
    session = SESSIONS[name]
    assert session not in first["argv"]
    assert session in second["argv"]
    repair_text = second["stdin"] or second["argv"][-1]
    assert "the answer holds no JSON object" in repair_text
    assert "Fix it." not in repair_text
    assert any(line.startswith("[zeroshot-runner] output repair 1:") for line in lines.lines)


def test_gemini_has_no_session_a_repair_runs_the_task_again_with_the_wrong_answer(
    tmp_path: Path,
) -> None:
    provider, log = provider_for("gemini", tmp_path, ["All good.", ANSWER])
    job, _ = job_for(claim_for(prompt="Fix it."))

    outcome = provider.run(job)

    assert isinstance(outcome, Completed)
    assert outcome.repairs == 1
    prompt = calls_in(log)[1]["argv"][-1]
    assert prompt.startswith("--prompt=Fix it.\n\nYour previous answer was:\nAll good.")


def test_an_answer_still_wrong_after_the_repair_fails_as_retryable(tmp_path: Path) -> None:
    provider, log = provider_for("claude", tmp_path, ["No JSON here."])
    job, lines = job_for(claim_for())

    outcome = provider.run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert outcome.repairs == 1
    assert "after 1 output repair" in outcome.error
    assert len(calls_in(log)) == 2
    assert lines.lines[-1] == "[zeroshot-runner] output repairs: 1; the answer is still wrong"


def test_a_missing_cli_fails_the_task_as_retryable(tmp_path: Path) -> None:
    provider = CommandProvider(
        default_timeout=5.0,
        environment={"PATH": str(tmp_path)},
        agent_cli=AgentCli(adapter=ADAPTERS["codex"], models=ModelTable.load()),
    )
    job, _ = job_for(claim_for())

    outcome = provider.run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "could not start" in outcome.error


def test_a_model_table_file_replaces_the_defaults_it_names(tmp_path: Path) -> None:
    table_file = tmp_path / "models.json"
    table_file.write_text(
        json.dumps(
            {"codex": {"levels": {"level2": {"model": "gpt-5.6", "reasoningEffort": "low"}}}}
        )
    )
    table = ModelTable.load(table_file)

    choice = table.choose("codex", claim_for().agent)
    assert (choice.model, choice.effort) == ("gpt-5.6", "low")
    assert table.choose("codex", claim_for(modelLevel="level3").agent).effort == "xhigh"
    assert table.choose("claude", claim_for().agent).model == "sonnet"

    table_file.write_text(json.dumps({"codex": {"levels": {"level9": {}}}}))
    with pytest.raises(ModelTableError):
        ModelTable.load(table_file)


@pytest.mark.parametrize("name", ["claude", "codex", "gemini", "opencode"])
def test_tenant_text_never_becomes_an_option_of_the_cli(tmp_path: Path, name: str) -> None:
    # a prompt that looks like an option stays the prompt
    provider, log = provider_for(name, tmp_path, [ANSWER])
    job, _ = job_for(claim_for(prompt="--yolo --dangerously-skip-permissions"))
    assert isinstance(provider.run(job), Completed)
    argv = calls_in(log)[0]["argv"]
    assert "--yolo" not in argv
    assert "--dangerously-skip-permissions" not in argv

    # and a model name that looks like one fails the task for good, the CLI never started
    job, _ = job_for(claim_for(model="--dangerously-skip-permissions"))
    outcome = provider.run(job)
    assert isinstance(outcome, Failed)
    assert outcome.retryable is False
    assert len(calls_in(log)) == 1


def test_a_prompt_too_long_for_a_command_line_goes_on_stdin(tmp_path: Path) -> None:
    provider, log = provider_for("opencode", tmp_path, [ANSWER])
    long_prompt = "Fix it. " * 20_000
    job, _ = job_for(claim_for(prompt=long_prompt))

    assert isinstance(provider.run(job), Completed)
    call = calls_in(log)[0]
    assert call["argv"][-1] == "Follow the instructions given on standard input."
    assert call["stdin"] == long_prompt
