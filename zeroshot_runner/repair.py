"""Output repair: an answer that is not a JSON object, or breaks the agent's ``jsonSchema``, is
sent back to the same agent once with what is wrong and the schema (zeroshot's structured-output
recovery, release v6.18.0).

A provider gives ``run_with_repair`` one function, ``attempt``: called with ``None`` it runs the
agent on the task's prompt; called with a ``Repair`` it asks again, in the agent's own session
when the CLI keeps one (``--resume``, ``exec resume``, ``--session``), else as a follow-up
(openai) or a fresh run with the repair appended to the prompt. Every repair is counted: a line
of the task's output says so, and the outcome carries the count.

After the repair, an answer still without a JSON object fails the task as retryable; one with an
object that still breaks the schema is handed to the server, which applies zeroshot's per-role
rule (SPEC §7.5: a validator's task fails, another agent's result is used with a warning).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import jsonschema
from jsonschema.exceptions import SchemaError

from zeroshot_runner.providers.base import Job
from zeroshot_runner.records import JSON, AgentSpec, Completed, Failed, Outcome
from zeroshot_runner.results import AgentOutput, outcome_from_agent_output

# zeroshot asks once more; a second wrong answer is the agent's, not the format's, problem.
MAX_REPAIRS = 1
# Lines the runner itself adds to a task's output start with this.
MARK = "[zeroshot-runner]"
_MAX_PROBLEMS = 10
_PROBLEM_CHARS = 300


@dataclass(frozen=True, slots=True)
class Reply:
    """One answer of the agent, read; ``session`` is the CLI's session id when it printed one."""

    read: AgentOutput
    session: str | None = None


@dataclass(frozen=True, slots=True)
class Repair:
    """Asking again: the answer that was wrong, what is wrong with it, and the message to send."""

    previous: Reply
    problems: tuple[str, ...]
    prompt: str


Attempt = Callable[[Repair | None], Reply | Failed]


def run_with_repair(job: Job, attempt: Attempt) -> Outcome:
    """Run the agent, repairing its answer up to ``MAX_REPAIRS`` times; the task's outcome."""
    agent = job.claim.agent
    reply = attempt(None)
    if isinstance(reply, Failed):
        return reply
    problems = answer_problems(reply.read, agent)
    repairs = 0
    while problems and repairs < MAX_REPAIRS and not job.stop.is_set():
        repairs += 1
        job.emit(f"{MARK} output repair {repairs}: {'; '.join(problems)}; asking {agent.id} again")
        again = attempt(
            Repair(previous=reply, problems=problems, prompt=repair_prompt(problems, agent))
        )
        if isinstance(again, Failed):
            return replace(again, repairs=repairs)
        reply = again
        problems = answer_problems(reply.read, agent)
    outcome = outcome_from_agent_output(reply.read, wants_json=agent.wants_json)
    if repairs:
        job.emit(
            f"{MARK} output repairs: {repairs}; "
            + ("the answer is usable" if not problems else "the answer is still wrong")
        )
    if isinstance(outcome, Failed):
        note = f" (after {repairs} output repair)" if repairs else ""
        return Failed(error=outcome.error + note, retryable=outcome.retryable, repairs=repairs)
    if isinstance(outcome, Completed):
        return replace(outcome, repairs=repairs)
    return outcome


def answer_problems(read: AgentOutput, agent: AgentSpec) -> tuple[str, ...]:
    """What makes an answer unusable for its agent; empty when it is fine (or beyond repair)."""
    if read.error is not None or not agent.wants_json:
        # An error the agent reported is a failure of the run, not of its answer's format.
        return ()
    if read.result is None:
        return ("the answer holds no JSON object (or its JSON is invalid)",)
    schema = agent_schema(agent)
    if schema is None:
        return ()
    try:
        validator_class = jsonschema.validators.validator_for(schema)
        validator_class.check_schema(schema)
    except SchemaError:
        # A broken schema is the config's fault; the server reports it (SPEC §7.5).
        return ()
    errors = sorted(
        validator_class(schema).iter_errors(read.result), key=lambda error: list(error.path)
    )
    return tuple(_describe(error) for error in errors[:_MAX_PROBLEMS])


def agent_schema(agent: AgentSpec) -> Mapping[str, JSON] | None:
    """The agent's ``jsonSchema`` (an object, or a JSON text of one), if it has one."""
    schema = agent.config.get("jsonSchema")
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except ValueError:
            return None
    return schema if isinstance(schema, Mapping) else None


def repair_prompt(problems: tuple[str, ...], agent: AgentSpec) -> str:
    """The message that asks the agent for its answer again."""
    schema = agent_schema(agent)
    wanted = (
        "Answer again with only one JSON object that matches this JSON schema:\n"
        + json.dumps(schema, indent=2, ensure_ascii=False)
        if schema is not None
        else "Answer again with only one JSON object."
    )
    listed = "\n".join(f"- {problem}" for problem in problems)
    return (
        "Your previous answer could not be used as the result of this task:\n"
        f"{listed}\n\n{wanted}\nDo not repeat the work; only restate its result in that form."
    )


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(part) for part in error.absolute_path) or "(root)"
    return f"{where}: {error.message}"[:_PROBLEM_CHARS]
