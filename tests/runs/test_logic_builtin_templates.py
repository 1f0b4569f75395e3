"""Every script of our own templates (``context/builtin_templates``), both ways it can go.

The scripts are found by walking the resolved templates; each is recognised by its agent's role,
its topic and its action, and evaluated in a ledger that should make it pass and in one that
should not. A script that nobody recognises fails the test, so a new script needs a scenario.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from context.cluster_templates import template_builtin_list, template_resolve
from runs.logic import ClusterInfo, TriggerOutcome, trigger_logic_evaluate
from tests.runs.ledger_data import Run

BUILTINS = template_builtin_list()


def scripted_triggers() -> Iterator[Any]:
    for name, body in sorted(BUILTINS.items()):
        config = template_resolve(body, {})
        for agent in config["agents"]:
            for position, trigger in enumerate(agent["triggers"]):
                if trigger.get("logic"):
                    label = f"{name}:{agent['id']}:triggers[{position}]"
                    yield pytest.param(config, agent, trigger, id=label)


def role_ids(config: dict[str, Any], role: str) -> list[str]:
    return [a["id"] for a in config["agents"] if a.get("role") == role]


def handoff_round(config: dict[str, Any], verdicts: dict[str, Any]) -> Run:
    """A first round that every validator rejected, then a new handoff and these verdicts."""
    [implementer] = role_ids(config, "implementation")
    status = {"completionStatus": {"canValidate": True, "percentComplete": 100}}
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="Fix the date parser")
    run.publish("IMPLEMENTATION_READY", implementer, text="First try", data=status)
    for validator in role_ids(config, "validator"):
        run.publish("VALIDATION_RESULT", validator, data={"approved": False})
    run.publish("AGENT_LIFECYCLE", implementer, data={"event": "TASK_COMPLETED"})
    run.publish("IMPLEMENTATION_READY", implementer, text="Second try", data=status)
    for validator, approved in verdicts.items():
        errors = [] if approved else ["a test fails"]
        run.publish("VALIDATION_RESULT", validator, data={"approved": approved, "errors": errors})
    return run


def handoff(config: dict[str, Any], sender: str, status: Any) -> Run:
    run = Run()
    run.publish("ISSUE_OPENED", "system", text="Fix the date parser")
    data = {"completionStatus": status} if status is not None else {}
    run.publish("IMPLEMENTATION_READY", sender, text="progress", data=data)
    return run


def scenarios(
    config: dict[str, Any], agent: dict[str, Any], trigger: dict[str, Any]
) -> dict[str, tuple[Run, bool]]:
    """Runs whose last message should make the script pass (True) or not (False)."""
    role, topic, action = agent.get("role"), trigger["topic"], trigger.get("action")
    validators = role_ids(config, "validator")
    me = agent["id"]
    if role == "implementation" and topic == "IMPLEMENTATION_READY":
        return {
            "own handoff that cannot be validated yet": (
                handoff(config, me, {"canValidate": False, "percentComplete": 40}),
                True,
            ),
            "own handoff ready for validation": (handoff(config, me, {"canValidate": True}), False),
            "someone else's handoff": (handoff(config, "planner", {"canValidate": False}), False),
        }
    if role == "implementation" and topic == "VALIDATION_RESULT":
        one_rejects = {v: v != validators[-1] for v in validators}
        all_approve = {v: (True if n % 2 else "true") for n, v in enumerate(validators)}
        one_missing = dict.fromkeys(validators[:-1], False)
        rejected_wins = action != "stop_cluster"
        return {
            "one validator rejects": (handoff_round(config, one_rejects), rejected_wins),
            "every validator approves": (handoff_round(config, all_approve), not rejected_wins),
            "a validator has not answered": (handoff_round(config, one_missing), False),
        }
    if role == "validator" and topic == "IMPLEMENTATION_READY":
        return {
            "ready for validation": (handoff(config, validators[0], {"canValidate": True}), True),
            "no status at all": (handoff(config, "worker", None), True),
            "not ready yet": (handoff(config, "worker", {"canValidate": False}), False),
        }
    raise AssertionError(f"no scenario for {agent['id']} on {topic} ({action}): write one")


@pytest.mark.parametrize(("config", "agent", "trigger"), list(scripted_triggers()))
def test_every_trigger_script_goes_both_ways(
    config: dict[str, Any], agent: dict[str, Any], trigger: dict[str, Any]
) -> None:
    # given each scenario of this script
    cases = scenarios(config, agent, trigger)

    # when it is evaluated on the scenario's last message
    outcomes = {
        story: trigger_logic_evaluate(
            trigger["logic"]["script"],
            message=run.last,
            view=run.view(),
            cluster=ClusterInfo.of(id=run.cluster_id, config=config),
        )
        for story, (run, _) in cases.items()
    }

    # then it passes exactly where it should, and it goes both ways
    assert outcomes == {
        story: TriggerOutcome(passed=passes) for story, (_, passes) in cases.items()
    }
    assert {passes for _, passes in cases.values()} == {True, False}


def test_the_builtins_have_scripts_to_test() -> None:
    found = [param.id for param in scripted_triggers()]

    assert len(found) == 10
    assert "worker-validator:worker:triggers[2]" in found
