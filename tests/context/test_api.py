from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from context.models import ContextBuild
from ledger.interfaces import MessageDraft, cluster_create, message_publish, pipeline
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

WORKER = {
    "id": "worker",
    "role": "implementation",
    "prompt": "Implement the issue.",
    "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    "contextStrategy": {
        "maxTokens": 2000,
        "sources": [
            {"topic": "ISSUE_OPENED", "priority": "required"},
            {"topic": "NOTES", "amount": 2},
        ],
    },
}


@pytest.fixture
def run() -> str:
    cid = cluster_create(cluster_id="run-1", config={"agents": [WORKER]}).id
    message_publish(
        cluster_id=cid, draft=MessageDraft(topic="NOTES", sender="w", content={"text": "note"})
    )
    message_publish(
        cluster_id=cid,
        draft=MessageDraft(topic="ISSUE_OPENED", sender="system", content={"text": "Fix it"}),
    )
    return cid


def build(api: ApiClient, cid: str, **body: Any) -> Any:
    return api.post(f"/api/v1/clusters/{cid}/context", {"agent_id": "worker", **body})


def test_build_returns_context_and_metrics_and_records_it(api: ApiClient, run: str) -> None:
    response = build(api, run)

    assert response.status_code == 200
    body = response.json()
    assert body["context"].endswith(
        "\n## Triggering Message\n\nTopic: ISSUE_OPENED\nSender: system\n\nFix it\n"
    )
    assert "\n## Messages from topic: NOTES\n\n" in body["context"]
    assert body["metrics"]["total"]["chars"] == len(body["context"])
    assert body["metrics"]["strategy"] == {"maxTokens": 2000, "sourcesCount": 2}
    assert body["recorded"] is True
    assert ContextBuild.objects.count() == 1


def test_preview_records_nothing_and_max_tokens_overrides(api: ApiClient, run: str) -> None:
    body = build(api, run, preview=True, max_tokens=1).json()

    assert body["recorded"] is False
    assert body["build_id"] is None
    assert body["metrics"]["budget"]["maxTokens"] == 1
    notes = next(p for p in body["metrics"]["packs"] if p["id"] == "source:NOTES:1")
    assert (notes["status"], notes["reason"]) == ("skipped", "budget")
    assert ContextBuild.objects.count() == 0


def test_builds_are_listed_newest_first_and_paged(api: ApiClient, run: str) -> None:
    for _ in range(3):
        build(api, run)

    first = api.get(f"/api/v1/clusters/{run}/builds", limit=2).json()
    rest = api.get(f"/api/v1/clusters/{run}/builds", limit=2, before=first["next_before"]).json()

    assert [b["iteration"] for b in first["items"]] == [3, 2]
    assert [b["iteration"] for b in rest["items"]] == [1]
    assert rest["next_before"] is None
    assert first["items"][0]["metrics"]["agentId"] == "worker"


def test_build_errors_have_the_error_shape(api: ApiClient, run: str) -> None:
    unknown_agent = api.post(f"/api/v1/clusters/{run}/context", {"agent_id": "ghost"})
    bad_since = build(api, run, strategy={"sources": [{"topic": "NOTES", "since": "someday"}]})
    bad_field = build(api, run, max_tokens="many")
    unknown_cluster = api.post("/api/v1/clusters/none/context", {"agent_id": "worker"})

    assert unknown_agent.status_code == 404
    assert bad_since.status_code == 422
    assert "someday" in bad_since.json()["message"]
    assert "NOTES" in bad_since.json()["message"]
    assert bad_field.status_code == 422
    assert unknown_cluster.status_code == 404
    for response in (unknown_agent, bad_since, bad_field, unknown_cluster):
        assert {"code", "message"} <= set(response.json())


def test_as_of_sequence_through_the_api(api: ApiClient, run: str) -> None:
    message_publish(
        cluster_id=run,
        draft=MessageDraft(topic="NOTES", sender="w", content={"text": "later note"}),
    )

    past = build(api, run, as_of_sequence=2).json()
    now = build(api, run, preview=True).json()

    assert "later note" not in past["context"]
    assert "later note" in now["context"]
    assert past["recorded"] is False


def test_inline_agent_and_trigger(api: ApiClient, run: str) -> None:
    agent = {**WORKER, "id": "adhoc", "prompt": "Ad hoc work."}
    body = api.post(
        f"/api/v1/clusters/{run}/context",
        {
            "agent_id": "adhoc",
            "agent": agent,
            "triggering_message": {
                "topic": "MANUAL",
                "sender": "operator",
                "content": {"text": "now"},
            },
            "preview": True,
        },
    ).json()

    assert "Ad hoc work." in body["context"]
    assert body["metrics"]["triggeredBy"] == "MANUAL"


def test_validate_strategies(api: ApiClient) -> None:
    good = api.post(
        "/api/v1/strategies/validate", {"contextStrategy": {"sources": [{"topic": "ISSUE_OPENED"}]}}
    )
    bad = api.post(
        "/api/v1/strategies/validate",
        {
            "agents": [
                {
                    "id": "worker",
                    "contextStrategy": {"sources": [{"topic": "X", "strategy": "newest"}]},
                }
            ]
        },
    )
    empty = api.post("/api/v1/strategies/validate", {})

    assert good.status_code == 200
    assert good.json()["valid"] is True
    report = bad.json()
    assert report["valid"] is False
    message = report["errors"][0]["message"]
    assert "worker" in message
    assert "source 0" in message
    assert "strategy" in message
    assert empty.status_code == 422


def test_build_context_command(run: str) -> None:
    out, err = StringIO(), StringIO()

    call_command(
        "build_context", run, "worker", "--preview", "--max-tokens", "50", stdout=out, stderr=err
    )

    assert out.getvalue().endswith("Fix it\n")
    assert "preview" in err.getvalue()
    assert ContextBuild.objects.count() == 0


def test_build_context_command_prints_the_builds_one_total(run: str) -> None:
    import json
    import re

    out, err = StringIO(), StringIO()
    call_command(
        "build_context",
        run,
        "worker",
        "--preview",
        "--max-tokens",
        "5",
        stdout=StringIO(),
        stderr=err,
    )
    call_command(
        "build_context", run, "worker", "--preview", "--max-tokens", "5", "--json", stdout=out
    )
    metrics = json.loads(out.getvalue())["metrics"]

    final = metrics["budget"]["finalTokens"]
    assert final == metrics["total"]["estimatedTokens"]
    line = re.search(r"-- ([\d,]+) tokens of 5 · ([\d,]+) over budget", err.getvalue())
    assert line is not None, err.getvalue()
    assert int(line[1].replace(",", "")) == final
    assert int(line[2].replace(",", "")) == final - 5


def test_build_context_command_json_and_errors(run: str) -> None:
    import json

    out = StringIO()
    call_command("build_context", run, "worker", "--json", stdout=out, stderr=StringIO())
    body = json.loads(out.getvalue())

    assert body["recorded"] is True
    assert body["metrics"]["iteration"] == 1
    with pytest.raises(CommandError, match="ghost"):
        call_command("build_context", run, "ghost", stdout=StringIO(), stderr=StringIO())


def test_build_endpoint_query_count_is_bounded(
    api: ApiClient, run: str, django_assert_num_queries
) -> None:  # type: ignore[no-untyped-def]
    def count_queries() -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        # The test's data is never committed, so the pipeline runs only when asked.
        pipeline.run(run)
        with CaptureQueriesContext(connection) as ctx:
            assert build(api, run, preview=True).status_code == 200
        return len(ctx.captured_queries)

    small = count_queries()
    for i in range(200):
        message_publish(
            cluster_id=run, draft=MessageDraft(topic="NOTES", sender="w", content={"text": str(i)})
        )
    large = count_queries()

    # key, the pipeline's cursor (read-your-writes), cluster, trigger, previous build,
    # the guidance mailbox (two seeks in one statement), ISSUE_OPENED, NOTES
    assert small == large == 8
