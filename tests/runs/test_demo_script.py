"""The live demo's scripted agents run every built-in template to its end (``make run``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from context.cluster_templates import template_builtin_list
from context.services.templates import cluster_create_from_template
from ledger.interfaces import MessageFilter, cluster_get, message_query
from runs.services import cluster_start
from tests.conftest import ApiClient
from zeroshot_runner.providers.scripted import ScriptedProvider

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "dashboard" / "demo" / "agents.json"


# zeroshot's default entry point runs on a fresh ``make run`` too: the demo's junior conductor
# routes SIMPLE:TASK, and the worker-validator its CLUSTER_OPERATIONS loads runs to its end.
@pytest.mark.parametrize(
    "template", [*sorted(template_builtin_list()), "zeroshot/conductor-bootstrap"]
)
def test_the_demo_script_runs_each_builtin_template_to_completion(
    api: ApiClient, builtin_templates: None, template: str
) -> None:
    # given a started cluster of the template and the demo's canned answers
    script = ScriptedProvider.from_file(DEMO_SCRIPT).script
    cluster_id = cluster_create_from_template(template_name=template, params={}).id
    cluster_start(cluster_id=cluster_id, issue={"title": "Demo", "text": "Add a control"})
    # when every task is answered as the demo's runner answers it
    for _ in range(30):
        claim = api.post("/api/v1/tasks/claim", {"wait": 0})
        if claim.status_code == 204:
            break
        task = claim.json()["task"]
        agent_script = script.get(task["agent_id"]) or script["*"]
        entry = agent_script.entry(task["iteration"])
        done = api.post(
            f"/api/v1/tasks/{task['id']}/complete",
            {"lease_id": task["lease_id"], "result": entry.result, "output": ""},
        )
        assert done.status_code == 200, done.content
    # then the cluster completed, without a schema warning or an agent error on the way
    assert cluster_get(cluster_id=cluster_id).state == "completed"
    complaints = message_query(
        cluster_id=cluster_id,
        where=MessageFilter(topic=("AGENT_SCHEMA_WARNING", "AGENT_ERROR")),
    )
    assert complaints == []
