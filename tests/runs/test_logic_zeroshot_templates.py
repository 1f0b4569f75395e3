"""zeroshot's own template scripts, run unchanged, both ways they can go.

The templates are kept in ``tests/fixtures/zeroshot/templates``. Each row evaluates one
script of one template on a ledger built for it; ``test_every_script_has_rows`` checks that the
rows cover every script the templates hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from context.cluster_templates import template_resolve
from runs.logic import (
    AgentInfo,
    ClusterInfo,
    TransformMessage,
    TriggerOutcome,
    deep_merge,
    hook_logic_evaluate,
    substitute,
    transform_evaluate,
    trigger_logic_evaluate,
)
from tests.fixtures import ZEROSHOT
from tests.runs.ledger_data import Run

TEMPLATES = ZEROSHOT / "templates"

# Params that switch on agents whose scripts would otherwise be dropped by their condition.
PARAMS: dict[str, dict[str, Any]] = {
    "full-workflow": {"task_type": "TASK"},
    "full-workflow/critical": {"task_type": "TASK", "complexity": "CRITICAL", "validator_count": 0},
    "single-worker": {"task_type": "TASK"},
    "worker-validator": {"task_type": "TASK"},
}
TRIGGER, HOOK_LOGIC, TRANSFORM = "trigger", "hooks.onComplete.logic", "hooks.onComplete.transform"
ISSUE = "Add a --dry-run flag to the importer"


def config_of(variant: str) -> dict[str, Any]:
    name = variant.split("/")[0]
    raw = json.loads((TEMPLATES / f"{name}.json").read_text(encoding="utf-8"))
    resolved: dict[str, Any] = template_resolve(raw, PARAMS.get(variant, {}))
    return resolved


@dataclass(frozen=True)
class Row:
    """One script evaluated on one ledger: the run's last message is the one offered."""

    variant: str
    agent: str
    where: str  # "triggers[N]", HOOK_LOGIC or TRANSFORM
    story: str
    ledger: Callable[[], Run]
    expected: Any
    result: dict[str, Any] | None = field(default=None)

    @property
    def template(self) -> str:
        return self.variant.split("/")[0]


# --- ledgers ------------------------------------------------------------------------------------


def issue(metadata: Any = None, sender: str = "system") -> Run:
    run = Run()
    run.publish("ISSUE_OPENED", sender, text=ISSUE, metadata=metadata)
    return run


def one(topic: str, sender: str, **fields: Any) -> Callable[[], Run]:
    def build() -> Run:
        run = issue()
        run.publish(topic, sender, **fields)
        return run

    return build


def escalation(task_text: str | None) -> Callable[[], Run]:
    def build() -> Run:
        run = issue()
        data = {"complexity": "UNCERTAIN", "taskType": "TASK", "taskText": task_text}
        if task_text is None:
            data.pop("taskText")
        run.publish("CONDUCTOR_ESCALATE", "junior-conductor", text="unclear scope", data=data)
        return run

    return build


def verdicts(*answers: tuple[str, Any], handoff: bool = True) -> Callable[[], Run]:
    """A rejected first round, a new handoff (unless not), then these VALIDATION_RESULTs."""

    def build() -> Run:
        run = issue()
        run.publish("IMPLEMENTATION_READY", "worker", text="first try")
        run.publish("VALIDATION_RESULT", "validator", data={"approved": False, "errors": ["x"]})
        if handoff:
            run.publish("IMPLEMENTATION_READY", "worker", text="second try")
        for sender, approved in answers:
            run.publish("VALIDATION_RESULT", sender, data={"approved": approved, "errors": []})
        return run

    return build


def fresh_verdicts(*answers: tuple[str, Any]) -> Callable[[], Run]:
    """Like ``verdicts`` but without an earlier round: only these answers exist."""

    def build() -> Run:
        run = issue()
        run.publish("IMPLEMENTATION_READY", "worker", text="done")
        for sender, approved in answers:
            run.publish("VALIDATION_RESULT", sender, data={"approved": approved, "errors": []})
        return run

    return build


def quick_round(*validators: str) -> Callable[[], Run]:
    def build() -> Run:
        run = issue()
        run.publish("IMPLEMENTATION_READY", "worker", text="done")
        for validator in validators:
            data = {"approved": False, "errors": [f"{validator} objects"], "validatorId": validator}
            run.publish("QUICK_VALIDATION_RESULT", validator, data=data)
        return run

    return build


def heavy_round(*validators: str, after_consensus: bool = False) -> Callable[[], Run]:
    """Stage 2: a QUICK_VALIDATION_PASSED, then heavy results (after a consensus, if asked)."""

    def build() -> Run:
        run = issue()
        run.publish("QUICK_VALIDATION_PASSED", "consensus-coordinator", text="Stage 1 passed")
        if after_consensus:
            for validator in ("validator-security", "validator-tester"):
                run.publish("HEAVY_VALIDATION_RESULT", validator, data={"approved": False})
            run.publish("VALIDATION_RESULT", "consensus-coordinator", data={"approved": False})
        for validator in validators:
            data = {"approved": False, "errors": [f"{validator} objects"], "qualityGates": []}
            run.publish("HEAVY_VALIDATION_RESULT", validator, data=data)
        return run

    return build


def republished(topic: str, mark: bool) -> Callable[[], Run]:
    metadata = {"_republished": True} if mark else None
    return one(topic, "consensus-coordinator", text="impl", data={"a": 1}, metadata=metadata)


# --- expected messages --------------------------------------------------------------------------


def routed(text: str, complexity: str, task_type: str, task_text: str, **params: Any) -> Any:
    """The CLUSTER_OPERATIONS a conductor publishes for a classification."""
    base = params.pop("base")
    common = {"task_type": task_type, "complexity": complexity, "max_iterations": 100}
    return TransformMessage(
        topic="CLUSTER_OPERATIONS",
        content={
            "text": text,
            "data": {
                "complexity": complexity,
                "taskType": task_type,
                "operations": [
                    {"action": "load_config", "config": {"base": base, "params": common | params}},
                    {
                        "action": "publish",
                        "topic": "ISSUE_OPENED",
                        "content": {"text": task_text},
                        "metadata": {"_republished": True},
                    },
                ],
            },
        },
    )


def stage(text: str, base: str, republish: str) -> TransformMessage:
    """The CLUSTER_OPERATIONS the meta-coordinator publishes to load a validation stage."""
    params = {"validator_level": "level3", "max_tokens": 100000, "timeout": 0}
    return TransformMessage(
        topic="CLUSTER_OPERATIONS",
        content={
            "text": text,
            "data": {
                "operations": [
                    {"action": "load_config", "config": {"base": base, "params": params}},
                    {
                        "action": "publish",
                        "topic": republish,
                        "content": {"text": "impl", "data": {"a": 1}},
                        "metadata": {"_republished": True},
                    },
                ]
            },
        },
    )


def heavy_verdict(text: str, approved: bool, summary: str) -> TransformMessage:
    errors = ["validator-security objects", "validator-tester objects"]
    data = {"approved": approved, "stage": "heavy", "summary": summary, "errors": errors}
    return TransformMessage(
        topic="VALIDATION_RESULT", content={"text": text, "data": data | {"qualityGates": []}}
    )


# --- rows ---------------------------------------------------------------------------------------

ROWS = [
    # conductor-bootstrap
    Row("conductor-bootstrap", "junior-conductor", "triggers[0]", "a new issue", issue, True),
    Row(
        "conductor-bootstrap",
        "junior-conductor",
        "triggers[0]",
        "the issue it republished itself",
        lambda: issue(metadata={"_republished": True}),
        False,
    ),
    Row(
        "conductor-bootstrap",
        "junior-conductor",
        "triggers[0]",
        "an issue from an agent",
        lambda: issue(sender="worker"),
        False,
    ),
    Row(
        "conductor-bootstrap",
        "junior-conductor",
        TRANSFORM,
        "an uncertain classification escalates",
        issue,
        TransformMessage(
            topic="CONDUCTOR_ESCALATE",
            content={
                "text": "scope unclear",
                "data": {
                    "complexity": "UNCERTAIN",
                    "taskType": "TASK",
                    "reasoning": "scope unclear",
                    "taskText": ISSUE,
                },
            },
        ),
        result={"complexity": "UNCERTAIN", "taskType": "TASK", "reasoning": "scope unclear"},
    ),
    Row(
        "conductor-bootstrap",
        "junior-conductor",
        TRANSFORM,
        "a simple task loads worker-validator",
        issue,
        routed(
            "[SIMPLE:TASK] one flag",
            "SIMPLE",
            "TASK",
            ISSUE,
            base="worker-validator",
            max_tokens=100000,
            worker_level="level2",
            validator_level="level2",
        ),
        result={"complexity": "SIMPLE", "taskType": "TASK", "reasoning": "one flag"},
    ),
    Row(
        "conductor-bootstrap",
        "senior-conductor",
        TRANSFORM,
        "the escalated task text is republished",
        escalation("the escalated text"),
        routed(
            "Senior: [CRITICAL:DEBUG] risky",
            "CRITICAL",
            "DEBUG",
            "the escalated text",
            base="debug-workflow",
            max_tokens=150000,
            investigator_level="level3",
            fixer_level="level2",
            tester_level="level2",
        ),
        result={"complexity": "CRITICAL", "taskType": "DEBUG", "reasoning": "risky"},
    ),
    Row(
        "conductor-bootstrap",
        "senior-conductor",
        TRANSFORM,
        "without task text, the message text is",
        escalation(None),
        routed(
            "Senior: [STANDARD:TASK] fine",
            "STANDARD",
            "TASK",
            "unclear scope",
            base="full-workflow",
            max_tokens=100000,
            planner_level="level2",
            worker_level="level2",
            validator_level="level2",
            validator_count=2,
        ),
        result={"complexity": "STANDARD", "taskType": "TASK", "reasoning": "fine"},
    ),
    # debug-workflow
    Row(
        "debug-workflow",
        "fixer",
        "triggers[1]",
        "the tester rejected",
        one("VALIDATION_RESULT", "tester", data={"approved": False}),
        True,
    ),
    Row(
        "debug-workflow",
        "fixer",
        "triggers[1]",
        "the tester rejected, as a string",
        one("VALIDATION_RESULT", "tester", data={"approved": "false"}),
        True,
    ),
    Row(
        "debug-workflow",
        "fixer",
        "triggers[1]",
        "the tester approved",
        one("VALIDATION_RESULT", "tester", data={"approved": True}),
        False,
    ),
    Row(
        "debug-workflow",
        "completion-detector",
        "triggers[0]",
        "approved",
        one("VALIDATION_RESULT", "tester", data={"approved": True}),
        True,
    ),
    Row(
        "debug-workflow",
        "completion-detector",
        "triggers[0]",
        "approved, as a string",
        one("VALIDATION_RESULT", "tester", data={"approved": "true"}),
        True,
    ),
    Row(
        "debug-workflow",
        "completion-detector",
        "triggers[0]",
        "rejected",
        one("VALIDATION_RESULT", "tester", data={"approved": False}),
        False,
    ),
    # full-workflow, STANDARD: two validators
    Row(
        "full-workflow",
        "worker",
        "triggers[1]",
        "its own progress",
        one("WORKER_PROGRESS", "worker"),
        True,
    ),
    Row(
        "full-workflow",
        "worker",
        "triggers[1]",
        "someone else's progress",
        one("WORKER_PROGRESS", "planner"),
        False,
    ),
    Row(
        "full-workflow",
        "worker",
        "triggers[2]",
        "one validator rejects",
        verdicts(("validator-requirements", True), ("validator-code", "false")),
        True,
    ),
    Row(
        "full-workflow",
        "worker",
        "triggers[2]",
        "both approve",
        verdicts(("validator-requirements", True), ("validator-code", True)),
        False,
    ),
    Row(
        "full-workflow",
        "worker",
        "triggers[2]",
        "one has not answered yet",
        verdicts(("validator-code", False)),
        False,
    ),
    Row(
        "full-workflow/critical",
        "worker",
        "triggers[2]",
        "staged validation: the consensus rejects",
        fresh_verdicts(("consensus-coordinator", False)),
        True,
    ),
    Row(
        "full-workflow/critical",
        "worker",
        "triggers[2]",
        "staged validation: the consensus approves",
        fresh_verdicts(("consensus-coordinator", True)),
        False,
    ),
    Row(
        "full-workflow",
        "worker",
        HOOK_LOGIC,
        "cannot validate yet: progress instead",
        lambda: issue(),
        {"topic": "WORKER_PROGRESS"},
        result={"summary": "half done", "completionStatus": {"canValidate": False}},
    ),
    Row(
        "full-workflow",
        "worker",
        HOOK_LOGIC,
        "ready: no change",
        lambda: issue(),
        None,
        result={"summary": "done", "completionStatus": {"canValidate": True}},
    ),
    # full-workflow, CRITICAL: the meta-coordinator loads the validation stages
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        "triggers[0]",
        "the worker's handoff",
        republished("IMPLEMENTATION_READY", mark=False),
        True,
    ),
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        "triggers[0]",
        "its own republished handoff",
        republished("IMPLEMENTATION_READY", mark=True),
        False,
    ),
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        "triggers[1]",
        "stage 1 passed",
        republished("QUICK_VALIDATION_PASSED", mark=False),
        True,
    ),
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        "triggers[1]",
        "its own republished pass",
        republished("QUICK_VALIDATION_PASSED", mark=True),
        False,
    ),
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        TRANSFORM,
        "load the quick stage",
        republished("IMPLEMENTATION_READY", mark=False),
        stage("Stage 1 (quick)", "quick-validation", "IMPLEMENTATION_READY"),
        result={"action": "load_quick"},
    ),
    Row(
        "full-workflow/critical",
        "meta-coordinator",
        TRANSFORM,
        "load the heavy stage",
        republished("QUICK_VALIDATION_PASSED", mark=False),
        stage("Stage 2 (heavy)", "heavy-validation", "QUICK_VALIDATION_PASSED"),
        result={"action": "load_heavy"},
    ),
    # heavy-validation
    Row(
        "heavy-validation",
        "consensus-coordinator",
        "triggers[0]",
        "both heavy validators answered",
        heavy_round("validator-security", "validator-tester"),
        True,
    ),
    Row(
        "heavy-validation",
        "consensus-coordinator",
        "triggers[0]",
        "one heavy validator answered",
        heavy_round("validator-security"),
        False,
    ),
    Row(
        "heavy-validation",
        "consensus-coordinator",
        "triggers[0]",
        "one answered since the last consensus",
        heavy_round("validator-tester", after_consensus=True),
        False,
    ),
    Row(
        "heavy-validation",
        "consensus-coordinator",
        TRANSFORM,
        "a rejection gathers every heavy error",
        heavy_round("validator-security", "validator-tester"),
        heavy_verdict("Stage 2 rejected", False, "two objections"),
        result={"allApproved": False, "summary": "two objections"},
    ),
    Row(
        "heavy-validation",
        "consensus-coordinator",
        TRANSFORM,
        "an approval",
        heavy_round("validator-security", "validator-tester"),
        heavy_verdict("All validations passed", True, "fine"),
        result={"allApproved": True, "summary": "fine"},
    ),
    # quick-validation
    Row(
        "quick-validation",
        "consensus-coordinator",
        "triggers[0]",
        "both quick validators answered",
        quick_round("validator-requirements", "validator-code"),
        True,
    ),
    Row(
        "quick-validation",
        "consensus-coordinator",
        "triggers[0]",
        "one quick validator answered",
        quick_round("validator-code"),
        False,
    ),
    Row(
        "quick-validation",
        "consensus-coordinator",
        HOOK_LOGIC,
        "a rejection becomes the stage's VALIDATION_RESULT",
        quick_round("validator-requirements", "validator-code"),
        {
            "topic": "VALIDATION_RESULT",
            "content": {
                "text": "Stage 1 rejected",
                "data": {
                    "approved": False,
                    "stage": "quick",
                    "errors": ["validator-requirements objects", "validator-code objects"],
                    "qualityGates": [],
                },
            },
        },
        result={"allApproved": False},
    ),
    Row(
        "quick-validation",
        "consensus-coordinator",
        HOOK_LOGIC,
        "an approval keeps QUICK_VALIDATION_PASSED",
        quick_round("validator-requirements", "validator-code"),
        None,
        result={"allApproved": True},
    ),
    # worker-validator
    Row(
        "worker-validator",
        "worker",
        "triggers[1]",
        "its own progress",
        one("WORKER_PROGRESS", "worker"),
        True,
    ),
    Row(
        "worker-validator",
        "worker",
        "triggers[1]",
        "someone else's progress",
        one("WORKER_PROGRESS", "validator"),
        False,
    ),
    Row(
        "worker-validator",
        "worker",
        "triggers[2]",
        "rejected after the newest handoff",
        verdicts(("validator", False)),
        True,
    ),
    Row(
        "worker-validator",
        "worker",
        "triggers[2]",
        "rejected, as a string",
        verdicts(("validator", "false")),
        True,
    ),
    Row(
        "worker-validator",
        "worker",
        "triggers[2]",
        "approved after the newest handoff",
        verdicts(("validator", True)),
        False,
    ),
    Row(
        "worker-validator",
        "worker",
        "triggers[2]",
        "no handoff since the rejection",
        verdicts(handoff=False),
        True,
    ),
    Row(
        "worker-validator",
        "worker",
        HOOK_LOGIC,
        "cannot validate yet: progress instead",
        lambda: issue(),
        {"topic": "WORKER_PROGRESS"},
        result={"summary": "half", "completionStatus": {"canValidate": False}},
    ),
    Row(
        "worker-validator",
        "worker",
        HOOK_LOGIC,
        "ready: no change",
        lambda: issue(),
        None,
        result={"summary": "done", "completionStatus": {"canValidate": True}},
    ),
]


def agent_of(config: dict[str, Any], agent_id: str) -> dict[str, Any]:
    [agent] = [a for a in config["agents"] if a["id"] == agent_id]
    return agent


def script_of(agent: dict[str, Any], where: str) -> str:
    if where.startswith("triggers["):
        position = int(where.removeprefix("triggers[").removesuffix("]"))
        script: str = agent["triggers"][position]["logic"]["script"]
        return script
    kind = where.rsplit(".", 1)[1]
    script = agent["hooks"]["onComplete"][kind]["script"]
    return script


def evaluate(row: Row) -> Any:
    config = config_of(row.variant)
    agent = agent_of(config, row.agent)
    script = script_of(agent, row.where)
    run = row.ledger()
    cluster = ClusterInfo.of(id=run.cluster_id, config=config)
    if row.where.startswith("triggers["):
        return trigger_logic_evaluate(script, message=run.last, view=run.view(), cluster=cluster)
    if row.where == HOOK_LOGIC:
        return hook_logic_evaluate(
            script,
            result=row.result,
            agent=AgentInfo(id=agent["id"], role=agent.get("role"), iteration=1),
            message=run.last,
            view=run.view(),
            cluster=cluster,
        )
    return transform_evaluate(
        script, result=row.result, triggering_message=run.last, view=run.view(), cluster=cluster
    )


@pytest.mark.parametrize("row", ROWS, ids=[f"{r.variant}:{r.agent}:{r.story}" for r in ROWS])
def test_script(row: Row) -> None:
    # given the row's ledger, when the template's script runs on its last message
    outcome = evaluate(row)

    # then it decides as zeroshot meant it to
    expected = (
        TriggerOutcome(passed=row.expected) if isinstance(row.expected, bool) else row.expected
    )
    assert outcome == expected


def found_scripts() -> set[tuple[str, str, str]]:
    found = set()
    for path in TEMPLATES.glob("*.json"):
        for agent in json.loads(path.read_text(encoding="utf-8"))["agents"]:
            for position, trigger in enumerate(agent.get("triggers", [])):
                if trigger.get("logic"):
                    found.add((path.stem, agent["id"], f"triggers[{position}]"))
            hook = (agent.get("hooks") or {}).get("onComplete") or {}
            for where, key in ((HOOK_LOGIC, "logic"), (TRANSFORM, "transform")):
                if hook.get(key):
                    found.add((path.stem, agent["id"], where))
    return found


def test_every_script_has_rows() -> None:
    covered = {(row.template, row.agent, row.where) for row in ROWS}

    assert covered == found_scripts()
    for script in found_scripts():
        outcomes = [r.expected for r in ROWS if (r.template, r.agent, r.where) == script]
        assert len(outcomes) >= 2, script
        if isinstance(outcomes[0], bool):
            assert set(outcomes) == {True, False}, script


def test_the_worker_hook_end_to_end() -> None:
    # given zeroshot's worker hook and a result that cannot be validated yet
    config = config_of("worker-validator")
    hook = agent_of(config, "worker")["hooks"]["onComplete"]
    result = {"summary": "half done", "completionStatus": {"canValidate": False, "left": ["x"]}}
    run = issue()

    # when its logic runs, its patch is merged and its placeholders are replaced
    patch = hook_logic_evaluate(
        hook["logic"]["script"],
        result=result,
        agent=AgentInfo(id="worker", role="implementation", iteration=2),
        message=run.last,
        view=run.view(),
        cluster=ClusterInfo.of(id=run.cluster_id, config=config),
    )
    assert isinstance(patch, dict)
    message = substitute(
        deep_merge(hook["config"], patch),
        result=result,
        output_text=json.dumps(result),
        cluster_id=run.cluster_id,
        cluster_created_at=1,
        iteration=2,
        error_message=None,
    )

    # then the worker publishes its progress with its result typed
    assert message == {
        "topic": "WORKER_PROGRESS",
        "content": {
            "text": "half done",
            "data": {"completionStatus": {"canValidate": False, "left": ["x"]}},
        },
    }
