"""Templates in the admin: a JSON editor checked on save, versions and their diffs (SPEC §4)."""

from __future__ import annotations

import copy
import html
import json
from typing import Any

import pytest
from django.test import Client

from context.services.templates import template_get, template_versions, templates_load_builtin

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client_(django_user_model: Any) -> Client:
    templates_load_builtin()
    user = django_user_model.objects.create_superuser("operator", "op@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


def change_url(name: str) -> str:
    return f"/admin/context/clustertemplate/{template_get(name=name).id}/change/"


def test_change_page_has_the_json_editor_and_the_versions(admin_client_: Client) -> None:
    response = admin_client_.get(change_url("worker-validator"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'class="template-json"' in page
    assert 'rows="36"' in page
    assert "context/admin/templates.css" in page
    assert 'class="template-versions"' in page
    assert "built-in template" in page
    # the body is shown indented, one key per line
    assert '\n  "name": "Worker and Validator",' in html.unescape(page)


def test_unknown_strategy_is_shown_on_the_form_and_nothing_is_saved(admin_client_: Client) -> None:
    # given the body of a built-in with strategy "newest" in its first source
    before = template_get(name="worker-validator")
    body = copy.deepcopy(before.body)
    body["agents"][0]["contextStrategy"]["sources"][0]["strategy"] = "newest"
    # when the change form is posted
    response = admin_client_.post(
        change_url("worker-validator"),
        {"body": json.dumps(body), "note": "try newest", "_save": "Save"},
    )
    # then the form comes back with the error naming agent, source and field
    assert response.status_code == 200
    page = html.unescape(response.content.decode())
    assert 'agent "worker", source 0, field "strategy": unknown strategy "newest"' in page
    assert "errorlist" in page
    # and nothing was saved
    after = template_get(name="worker-validator")
    assert after.body == before.body
    assert after.version_count == 1


def test_invalid_json_is_an_error_on_the_form(admin_client_: Client) -> None:
    response = admin_client_.post(
        change_url("single-worker"), {"body": "{not json", "_save": "Save"}
    )
    assert response.status_code == 200
    assert "Enter a valid JSON" in html.unescape(response.content.decode())
    assert template_get(name="single-worker").version_count == 1


def test_a_saved_change_keeps_a_version_and_shows_the_diff(admin_client_: Client) -> None:
    # given a built-in template
    template = template_get(name="debug-workflow")
    body = copy.deepcopy(template.body)
    body["description"] = "Investigate, fix and test <carefully>"
    # when an operator saves a change with a note
    response = admin_client_.post(
        change_url("debug-workflow"),
        {"body": json.dumps(body), "note": "clearer description", "_save": "Save"},
    )
    # then the change is stored as version 2 and version 1 keeps the old body
    assert response.status_code == 302
    assert template_get(name="debug-workflow").body == body
    versions = template_versions(name="debug-workflow")
    assert [(v.version, v.note) for v in versions] == [
        (2, "clearer description"),
        (1, "built-in template"),
    ]
    assert versions[1].body == template.body
    # and the diff view shows the change, escaped
    diff = admin_client_.get(f"/admin/context/clustertemplate/{template.id}/versions/1/diff/")
    assert diff.status_code == 200
    page = diff.content.decode()
    assert "&lt;carefully&gt;" in page
    assert "<carefully>" not in page
    text = html.unescape(page)
    assert f'-  "description": {json.dumps(template.body["description"])},' in text
    assert '+  "description": "Investigate, fix and test <carefully>",' in text
    # and the change page links to it
    change_page = admin_client_.get(change_url("debug-workflow")).content.decode()
    assert f"/admin/context/clustertemplate/{template.id}/versions/1/diff/" in change_page


def test_diff_of_a_missing_version_is_404(admin_client_: Client) -> None:
    template = template_get(name="single-worker")
    url = f"/admin/context/clustertemplate/{template.id}/versions/9/diff/"
    assert admin_client_.get(url).status_code == 404


def test_adding_a_template(admin_client_: Client) -> None:
    # when a new template is added through the admin
    body = copy.deepcopy(template_get(name="single-worker").body)
    body["name"] = "My worker"
    response = admin_client_.post(
        "/admin/context/clustertemplate/add/",
        {"name": "my-worker", "body": json.dumps(body), "note": "first", "_save": "Save"},
    )
    # then it is stored with its first version
    assert response.status_code == 302
    created = template_get(name="my-worker")
    assert created.builtin is False
    assert created.version_count == 1
    assert template_versions(name="my-worker")[0].note == "first"


def test_context_builds_are_read_only(admin_client_: Client) -> None:
    assert admin_client_.get("/admin/context/contextbuild/").status_code == 200
    assert admin_client_.get("/admin/context/contextbuild/add/").status_code == 403


def test_the_editor_is_the_vendored_one_and_checks_as_you_type(admin_client_: Client) -> None:
    page = admin_client_.get(change_url("worker-validator")).content.decode()

    assert "/static/vendor/codemirror/zeroshot-editor.js" in page
    assert "/static/js/admin-template.js" in page
    assert 'data-check-url="/admin/context/clustertemplate/check/"' in page
    # the dashboard's preview goes under the editor
    assert 'id="template-preview" data-url="/templates/preview/"' in page


def test_the_check_places_each_problem_at_its_key(admin_client_: Client) -> None:
    url = "/admin/context/clustertemplate/check/"
    shape = copy.deepcopy(template_get(name="worker-validator").body)
    del shape["agents"][1]["role"]
    strategy = copy.deepcopy(template_get(name="worker-validator").body)
    strategy["agents"][0]["contextStrategy"]["sources"][1]["strategy"] = "newest"

    def problems(body: Any) -> list[dict[str, Any]]:
        response = admin_client_.post(url, data=json.dumps(body), content_type="application/json")
        return list(response.json()["problems"])

    broken = admin_client_.post(url, data="{", content_type="application/json")

    assert {"path": ["agents", 1, "role"], "severity": "error"}.items() <= problems(shape)[
        0
    ].items()
    newest = next(p for p in problems(strategy) if "newest" in p["message"])
    assert newest["path"] == ["agents", 0, "contextStrategy", "sources", 1, "strategy"]
    assert newest["severity"] == "error"
    assert broken.status_code == 400
    assert admin_client_.get(url).status_code == 405


def test_problem_paths_read_dotted_fields_and_strategy_problems() -> None:
    from context.services.templates import problem_path

    body = {"agents": [{"id": "a"}, {"id": "b"}]}

    assert problem_path(body, {"field": "params.level.type"}) == ["params", "level", "type"]
    assert problem_path(body, {"field": "agents[1].prompt"}) == ["agents", 1, "prompt"]
    assert problem_path(body, {"agent": "b", "source": None, "field": "sources"}) == [
        "agents",
        1,
        "contextStrategy",
        "sources",
    ]
    assert problem_path(body, {"agent": "ghost", "field": "x"}) == ["agents"]


def test_the_vendored_editor_is_the_file_its_readme_describes() -> None:
    import hashlib
    import re
    from pathlib import Path

    vendor = Path(__file__).resolve().parents[2] / "static" / "vendor"
    readme = (vendor / "README.md").read_text()
    recorded = re.search(r"\| sha256 \| `([0-9a-f]{64})` \|", readme)
    bundle = (vendor / "codemirror" / "zeroshot-editor.js").read_bytes()

    assert recorded is not None
    assert hashlib.sha256(bundle).hexdigest() == recorded[1]
    assert f"| size | {len(bundle)} bytes |" in readme


def test_the_check_query_count_is_pinned(
    admin_client_: Client, django_assert_num_queries: Any
) -> None:
    text = json.dumps(template_get(name="worker-validator").body)

    # session, user: the check itself reads nothing
    with django_assert_num_queries(2):
        admin_client_.post(
            "/admin/context/clustertemplate/check/", data=text, content_type="application/json"
        )
