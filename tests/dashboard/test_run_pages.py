"""The pages of running clusters: agents at work, tasks, recorded builds, start and stop."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from context.models import ContextBuild
from context.services.templates import templates_load_builtin
from ledger.interfaces import MessageDraft, cluster_create, cluster_get, message_publish
from ledger.models import Cluster
from runs.models import BufferedTrigger, Task
from runs.services import task_claim, task_complete

pytestmark = pytest.mark.django_db(transaction=True)

XSS = "<script>window.__xss=1</script>"
HX = {"HX-Request": "true"}


@pytest.fixture
def operator() -> Client:
    user = get_user_model().objects.create_user("op", password="pw-for-tests-1", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def worker(agent_id: str = "worker", topic: str = "GO") -> dict[str, Any]:
    return {
        "id": agent_id,
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": topic}],
        "contextStrategy": {"sources": [{"topic": topic}]},
    }


def running(*agents: dict[str, Any]) -> str:
    return cluster_create(cluster_id="run-1", config={"agents": list(agents)}, state="running").id


def go(cluster_id: str, text: str = "go") -> None:
    message_publish(
        cluster_id=cluster_id,
        draft=MessageDraft(topic="GO", sender="system", content={"text": text}),
    )


def test_the_agents_panel_shows_who_runs_and_what_waits(operator: Client) -> None:
    # given a worker running its first task with two more triggers waiting, and an idle agent
    cid = running(worker(), worker("reviewer", "REVIEW"))
    for _ in range(3):
        go(cid)
    task_claim(worker="box-1")
    # when the operator looks at the cluster (and the panel refreshes on its own)
    page = operator.get(f"/clusters/{cid}/").content.decode()
    panel = operator.get(f"/clusters/{cid}/agents-panel/", headers=HX).content.decode()
    # then the worker runs task #1 on box-1 with 2 waiting; the reviewer is idle
    for html in (page, panel):
        assert 'class="agent agent-running"' in html
        assert "task #1" in html
        assert "box-1" in html
        assert "2 waiting" in html
        assert 'class="agent agent-idle"' in html
    # the panel keeps refreshing while the cluster runs, and brings the state with it
    assert 'hx-trigger="every 1500ms"' in panel
    assert 'id="run-controls" class="run-controls" hx-swap-oob="true"' in panel


def test_the_agents_panel_query_count_is_pinned(
    operator: Client, django_assert_num_queries: Any
) -> None:
    cid = running(worker(), worker("reviewer", "REVIEW"))
    for _ in range(5):
        go(cid)
    # session, user, cluster, the pipeline's cursor (read-your-writes), open tasks, finished
    # tasks, the trigger buffers (four GOs wait), latest builds
    with django_assert_num_queries(8):
        operator.get(f"/clusters/{cid}/agents-panel/", {"v": 1}, headers=HX)
    # a page drawn from another config version gets the topology too: its versions, one more
    with django_assert_num_queries(9):
        operator.get(f"/clusters/{cid}/agents-panel/", {"v": 0}, headers=HX)


def test_a_cluster_is_started_from_a_template_with_an_issue(operator: Client) -> None:
    # given the built-in templates
    templates_load_builtin()
    listing = operator.get("/").content.decode()
    assert 'id="launch-form"' in listing
    assert '<option value="worker-validator">' in listing
    # when the operator starts one with an issue
    response = operator.post(
        "/launch/", {"template": "worker-validator", "title": "Login", "text": "Add a button"}
    )
    # then the new cluster runs, its worker has a task, and the page shows it
    assert response.status_code == 302
    cid = response["Location"].strip("/").split("/")[-1]
    assert cluster_get(cluster_id=cid).state == "running"
    assert Task.objects.get(cluster_id=cid).agent_id == "worker"
    page = operator.get(response["Location"]).content.decode()
    assert "state-running" in page
    assert "Stop</button>" in page


def test_the_start_form_labels_the_cluster_for_the_demo_pool_by_default(
    operator: Client,
) -> None:
    # given the start form: its labels field says pool=demo before anyone types
    templates_load_builtin()
    listing = operator.get("/").content.decode()
    assert 'name="labels"' in listing
    assert 'value="pool=demo"' in listing
    # when started with the labels as shown, with other labels, and with none
    started = {}
    for labels in ("pool=demo", "pool=gpu, team=a", ""):
        response = operator.post(
            "/launch/", {"template": "worker-validator", "text": "Add it", "labels": labels}
        )
        assert response.status_code == 302, response.content
        cid = response["Location"].strip("/").split("/")[-1]
        started[labels] = cluster_get(cluster_id=cid).labels
    # then each cluster carries what was asked for
    assert started == {
        "pool=demo": {"pool": "demo"},
        "pool=gpu, team=a": {"pool": "gpu", "team": "a"},
        "": {},
    }
    # and a cluster's page shows its labels
    labelled = Cluster.objects.get(labels={"pool": "gpu", "team": "a"}).id
    page = operator.get(f"/clusters/{labelled}/").content.decode()
    assert '<span class="mono">pool=gpu</span>, <span class="mono">team=a</span>' in page


def test_start_labels_that_are_not_key_value_are_refused(operator: Client) -> None:
    templates_load_builtin()
    response = operator.post(
        "/launch/", {"template": "worker-validator", "text": "Add it", "labels": "pool"}
    )
    assert response.status_code == 422
    assert "is not key=value" in response.content.decode()
    assert Cluster.objects.count() == 0


def test_a_bad_start_says_why_and_creates_nothing(operator: Client) -> None:
    templates_load_builtin()

    response = operator.post("/launch/", {"template": "nope", "text": ""})

    assert response.status_code == 422
    html = response.content.decode()
    assert "Select a valid choice" in html
    assert "This field is required" in html
    assert Task.objects.count() == 0


def test_start_and_stop_from_the_cluster_page(operator: Client) -> None:
    cid = cluster_create(cluster_id="s-1", config={"agents": [worker("w", "ISSUE_OPENED")]}).id
    assert "Start this cluster" in operator.get(f"/clusters/{cid}/").content.decode()

    started = operator.post(f"/clusters/{cid}/start/", {"title": "T", "text": "Do it"})
    assert started.status_code == 302
    assert cluster_get(cluster_id=cid).state == "running"
    again = operator.post(f"/clusters/{cid}/start/", {"text": "Again"})
    assert "run_error=" in again["Location"]
    assert "already has its issue" in operator.get(again["Location"]).content.decode()

    stopped = operator.post(f"/clusters/{cid}/stop/")
    assert stopped.status_code == 302
    assert cluster_get(cluster_id=cid).state == "stopped"
    assert Task.objects.get().state == "cancelled"


def test_start_and_stop_need_a_signed_in_operator_and_a_post(operator: Client) -> None:
    cid = running(worker())
    assert Client().post(f"/clusters/{cid}/stop/").status_code == 302  # to the login page
    assert cluster_get(cluster_id=cid).state == "running"
    assert operator.get(f"/clusters/{cid}/stop/").status_code == 405


def test_the_tasks_page_lists_durations_attempts_workers_and_builds(operator: Client) -> None:
    # given a completed task and a failed one whose error holds agent text
    cid = running(worker())
    go(cid)
    claimed = task_claim(worker="box-1")
    assert claimed is not None
    task_complete(
        task_id=claimed.task.id,
        lease_id=claimed.task.lease_id,
        result={},
        usage={"inputTokens": 321, "outputTokens": 10},
    )
    go(cid)
    Task.objects.filter(state="queued").update(state="failed", error=f"agent said {XSS}")
    # when the operator opens the tasks tab
    html = operator.get(f"/clusters/{cid}/tasks/").content.decode()
    # then both are there, newest first, with the build of the first and its billed tokens
    assert html.index("task-failed") < html.index("task-completed")
    assert f'href="/clusters/{cid}/builds/{claimed.task.build_id}/"' in html
    assert "321 billed" in html
    assert f"{ContextBuild.objects.get(pk=claimed.task.build_id).final_tokens:,} est." in html
    assert "box-1" in html
    assert "&lt;script&gt;" in html
    assert XSS not in html
    only_failed = operator.get(f"/clusters/{cid}/tasks/", {"state": "failed"}).content.decode()
    assert "task-completed" not in only_failed


def test_the_build_page_shows_estimated_and_billed_tokens(operator: Client) -> None:
    cid = running(worker())
    go(cid, text=f"fix {XSS}")
    claimed = task_claim(worker="box-1")
    assert claimed is not None
    task_complete(
        task_id=claimed.task.id,
        lease_id=claimed.task.lease_id,
        result={},
        usage={"inputTokens": 4000, "outputTokens": 12, "model": "m-1"},
    )
    build = ContextBuild.objects.get()

    html = operator.get(f"/clusters/{cid}/builds/{build.id}/").content.decode()

    assert f"{build.final_tokens:,}" in html
    assert "4,000" in html
    assert "m-1" in html
    assert f"{4000 / build.final_tokens:.2f}\u00d7" in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    assert XSS not in html
    assert operator.get(f"/clusters/{cid}/builds/999999/").status_code == 404


def test_the_metrics_page_keeps_each_agents_billed_over_estimated_ratio(operator: Client) -> None:
    # given two tasks of the worker whose agent reported what the model billed
    cid = running(worker())
    for billed in (3000, 5000):
        go(cid)
        claimed = task_claim(worker="box-1")
        assert claimed is not None
        task_complete(
            task_id=claimed.task.id,
            lease_id=claimed.task.lease_id,
            result={},
            usage={"inputTokens": billed, "outputTokens": 1},
        )
    estimates = list(ContextBuild.objects.order_by("id").values_list("final_tokens", flat=True))
    ratios = sorted(billed / tokens for billed, tokens in zip((3000, 5000), estimates, strict=True))
    # when the operator opens the metrics, then the worker's row has the median ratio
    html = operator.get(f"/clusters/{cid}/metrics/").content.decode()
    assert "Billed / estimated" in html
    assert f"{(ratios[0] + ratios[1]) / 2:.2f}\u00d7" in html
    assert "of 2</span>" in html


def test_the_topology_says_how_the_cluster_ends(operator: Client) -> None:
    judge = {
        "id": "judge",
        "role": "orchestrator",
        "prompt": "Judge.",
        "triggers": [{"topic": "VALIDATION_RESULT", "action": "stop_cluster"}],
    }
    own = cluster_create(cluster_id="own", config={"agents": [worker(), judge]}).id
    validator = {
        "id": "checker",
        "role": "validator",
        "prompt": "Check.",
        "triggers": [{"topic": "IMPLEMENTATION_READY"}],
    }
    builtin = cluster_create(cluster_id="rule", config={"agents": [worker(), validator]}).id

    assert "stop_cluster trigger" in operator.get(f"/clusters/{own}/").content.decode()
    html = operator.get(f"/clusters/{builtin}/").content.decode()
    # zeroshot's completion-detector joins a config without a completion handler
    # (orchestrator.js _injectCompletionAgent), and the topology shows it
    assert "Ends by zeroshot&#x27;s completion-detector" in html
    assert "every validator (checker)" in html
    assert "<title>completion-detector</title>" in html


def test_the_agents_panel_opened_directly_leads_to_the_cluster_page(operator: Client) -> None:
    cid = running(worker())

    response = operator.get(f"/clusters/{cid}/agents-panel/")

    assert response.status_code == 302
    assert response["Location"] == f"/clusters/{cid}/"


def test_launch_opened_with_a_get_leads_to_the_launch_form(operator: Client) -> None:
    response = operator.get("/launch/")

    assert response.status_code == 302
    assert response["Location"] == "/#launch-form"


def test_the_tasks_table_refreshes_itself_while_the_cluster_runs(operator: Client) -> None:
    # given a running cluster whose worker holds a task
    cid = running(worker())
    go(cid)
    claimed = task_claim(worker="box-1")
    assert claimed is not None
    # when the page is open, then its table asks again, and the refresh brings the state along
    page = operator.get(f"/clusters/{cid}/tasks/?agent=worker").content.decode()
    assert (
        f'id="tasks-region" hx-get="/clusters/{cid}/tasks/?agent=worker" '
        'hx-trigger="every 1500ms"' in page
    )
    region = operator.get(f"/clusters/{cid}/tasks/?agent=worker", headers=HX).content.decode()
    assert region.lstrip().startswith('<div id="tasks-region"')
    assert "task-claimed" in region
    assert 'id="run-controls" class="run-controls" hx-swap-oob="true"' in region
    assert "<html" not in region
    # and once the task is done and the cluster completed, the table stops asking
    task_complete(task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={})
    Cluster.objects.filter(id=cid).update(state="completed")
    done = operator.get(f"/clusters/{cid}/tasks/", headers=HX).content.decode()
    assert "task-completed" in done
    assert "hx-trigger" not in done
    assert "state-completed" in done


def test_the_tasks_page_shows_the_triggers_waiting_for_a_busy_agent(operator: Client) -> None:
    # given a worker busy with a task and two GOs that came meanwhile (SPEC §7.1)
    cid = running(worker())
    go(cid)
    assert task_claim(worker="box-1") is not None
    go(cid)
    go(cid)
    waiting = list(BufferedTrigger.objects.order_by("message_sequence"))
    # when the operator opens the tasks tab
    html = operator.get(f"/clusters/{cid}/tasks/").content.decode()
    # then they are listed, the next to be judged first, where queued tasks would have been
    assert "Waiting triggers" in html
    links = [f'href="/clusters/{cid}/messages/{w.message_sequence}.json"' for w in waiting]
    assert all(link in html for link in links)
    assert html.index(links[0]) < html.index(links[1])
    # and a filter on another state leaves them out
    assert (
        "Waiting triggers"
        not in operator.get(f"/clusters/{cid}/tasks/", {"state": "completed"}).content.decode()
    )


def test_the_tasks_page_query_count_is_pinned(
    operator: Client, django_assert_num_queries: Any
) -> None:
    cid = running(worker())
    for _ in range(3):
        go(cid)
        claimed = task_claim(worker="box-1")
        assert claimed is not None
        task_complete(task_id=claimed.task.id, lease_id=claimed.task.lease_id, result={})
    go(cid)
    claim = task_claim(worker="box-1")
    assert claim is not None
    for _ in range(3):
        go(cid)  # waiting in the worker's buffer
    # session, user, cluster, tasks, their builds' estimates, the waiting triggers
    with django_assert_num_queries(6):
        page = operator.get(f"/clusters/{cid}/tasks/")
    assert page.content.decode().count('class="trigger-waiting"') == 3
    with django_assert_num_queries(6):
        operator.get(f"/clusters/{cid}/tasks/", headers=HX)
