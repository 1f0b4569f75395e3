"""The templates API and clusters made from templates (SPEC §4, §6.1)."""

from __future__ import annotations

import copy
import html
from urllib.parse import quote

import pytest
from django.core.management import call_command

from context.services.templates import template_get, templates_load_builtin
from tests.conftest import ApiClient
from tests.fixtures import ZEROSHOT

pytestmark = pytest.mark.django_db

FIXTURE_TEMPLATES = ZEROSHOT / "templates"
OWN_BUILTINS = ["debug-workflow", "planner-worker-validators", "single-worker", "worker-validator"]
# zeroshot's cluster-templates/, shipped as built-ins (context/builtin_templates/zeroshot/)
ZEROSHOT_BUILTINS = [
    f"zeroshot/{name}"
    for name in (
        "conductor-bootstrap",
        "debug-workflow",
        "full-workflow",
        "heavy-validation",
        "quick-validation",
        "single-worker",
        "worker-validator",
    )
]
BUILTIN_NAMES = OWN_BUILTINS + ZEROSHOT_BUILTINS


@pytest.fixture(autouse=True)
def builtins(db: None) -> None:
    templates_load_builtin()


def test_list_and_get(api: ApiClient) -> None:
    # when the templates are listed
    response = api.get("/api/v1/templates")
    # then the built-ins are there with their summary
    assert response.status_code == 200
    listed = {t["name"]: t for t in response.json()}
    assert sorted(listed) == BUILTIN_NAMES
    worker_validator = listed["worker-validator"]
    assert worker_validator["builtin"] is True
    assert worker_validator["agent_count"] == 2
    assert worker_validator["version_count"] == 1
    assert worker_validator["params"]["max_tokens"]["default"] == 100000
    assert worker_validator["description"]
    assert "body" not in worker_validator
    # and one template comes with its body
    one = api.get("/api/v1/templates/worker-validator").json()
    assert one["body"] == template_get(name="worker-validator").body
    missing = api.get("/api/v1/templates/nope")
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"


def test_the_seven_zeroshot_templates_import_and_are_listed(api: ApiClient) -> None:
    # when zeroshot's seven templates are imported
    paths = sorted(FIXTURE_TEMPLATES.glob("*.json"))
    assert len(paths) == 7
    call_command("import_template", *[str(p) for p in paths])
    # then they validate without errors and sit beside the eleven built-ins
    for path in paths:
        call_command("validate_template", str(path))
    listed = api.get("/api/v1/templates").json()
    assert len(listed) == 18
    imported = [t for t in listed if not t["builtin"]]
    assert len(imported) == 7
    assert "Worker + Validator" in {t["name"] for t in imported}
    assert sorted(t["name"] for t in listed if t["builtin"]) == BUILTIN_NAMES
    assert all(t["agent_count"] >= 1 and t["version_count"] == 1 for t in imported)
    one = api.get("/api/v1/templates/" + quote("Worker + Validator", safe=""))
    assert one.status_code == 200
    assert one.json()["body"]["params"]["task_type"]["enum"] == ["INQUIRY", "TASK", "DEBUG"]


def test_cluster_from_template_builds_with_its_max_tokens(api: ApiClient) -> None:
    # when a cluster is created from the worker-validator template with a smaller budget
    created = api.post(
        "/api/v1/clusters",
        {"id": "wv-api", "template": "worker-validator", "params": {"max_tokens": 5000}},
    )
    assert created.status_code == 201
    body = created.json()
    assert body["template"] == "worker-validator"
    assert [a["id"] for a in body["agents"]] == ["worker", "validator"]
    assert body["params"]["max_tokens"] == 5000
    # then its agents' contexts are built with that budget
    built = api.post(
        "/api/v1/clusters/wv-api/context",
        {
            "agent_id": "worker",
            "preview": True,
            "triggering_message": {
                "topic": "ISSUE_OPENED",
                "sender": "system",
                "content": {"text": "Add a login button"},
            },
        },
    )
    assert built.status_code == 200
    assert built.json()["metrics"]["strategy"]["maxTokens"] == 5000
    assert built.json()["recorded"] is False


def test_cluster_from_template_errors(api: ApiClient) -> None:
    unknown = api.post("/api/v1/clusters", {"template": "nope"})
    assert unknown.status_code == 404
    assert unknown.json()["code"] == "not_found"
    bad = api.post(
        "/api/v1/clusters", {"template": "worker-validator", "params": {"max_tokens": "lots"}}
    )
    assert bad.status_code == 422
    assert "max_tokens" in bad.json()["message"]
    assert bad.json()["details"]["errors"][0]["field"] == "params.max_tokens"
    both = api.post("/api/v1/clusters", {"template": "worker-validator", "config": {"agents": []}})
    assert both.status_code == 422


def test_validate_names_agent_source_and_field(api: ApiClient) -> None:
    # given a template whose first source asks for strategy "newest"
    body = copy.deepcopy(template_get(name="single-worker").body)
    body["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = "newest"
    # when it is checked through the API
    response = api.post("/api/v1/templates/validate", {"template": body})
    # then it is invalid with a message naming the agent, the source and the field
    assert response.status_code == 200
    result = response.json()
    assert result["valid"] is False
    agent = body["agents"][0]["id"]
    assert html.unescape(result["errors"][0]["message"]).startswith(
        f'agent "{agent}", source 0, field "strategy": unknown strategy "newest"'
    )
    ok = api.post(
        "/api/v1/templates/validate", {"template": template_get(name="single-worker").body}
    )
    assert ok.json()["valid"] is True


def test_a_zeroshot_built_in_is_read_by_its_name_with_a_slash(api: ApiClient) -> None:
    # zeroshot's templates are named zeroshot/<name>: their name reads back, escaped or not
    for path in ("zeroshot/conductor-bootstrap", quote("zeroshot/conductor-bootstrap", safe="")):
        one = api.get(f"/api/v1/templates/{path}")
        assert one.status_code == 200, one.content
        assert one.json()["name"] == "zeroshot/conductor-bootstrap"
