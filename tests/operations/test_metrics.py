"""/metrics: Prometheus text format behind its own token, each family matching the ledger."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from context.models import ContextBuild
from context.services.templates import cluster_create_from_template, templates_load_builtin
from ledger.interfaces import MessageDraft, message_publish_batch, message_query, now_ms
from ledger.models import Cluster
from operations.metrics import MESSAGES_PUBLISHED, WEBSOCKETS, WebsocketCounter, topic_family
from runs.logic import engine
from runs.models import Runner, Task
from runs.services.tasks import lease_look
from tests.communicators import CONNECT_TIMEOUT
from tests.conftest import ApiClient, subprocess_database_url
from tests.live_server import REPO
from tests.runs.conftest import ScriptedWorker

pytestmark = pytest.mark.django_db

TOKEN = "scrape-token-for-tests"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(token: str | None = TOKEN) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client().get("/metrics", headers=headers)


def samples() -> Samples:
    """Every sample of a scrape, read back with prometheus_client's own parser."""
    response = scrape()
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    found: Samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def by_family(cluster_id: str, after: int) -> Counter[str]:
    return Counter(
        topic_family(m.topic)
        for m in message_query(cluster_id=cluster_id, limit=None)
        if m.sequence > after
    )


def test_topic_families_are_a_fixed_few() -> None:
    assert topic_family("ISSUE_OPENED") == "issue"
    assert topic_family("AGENT_LIFECYCLE") == "agent"
    assert topic_family("STATE_SNAPSHOT") == "state"
    assert topic_family("MY_OWN_TOPIC") == "other"
    assert topic_family("x" * 60) == "other"


def test_metrics_are_off_without_a_token_and_refused_without_the_right_one() -> None:
    assert scrape().status_code == 404
    with override_settings(OPERATIONS_METRICS_TOKEN=TOKEN):
        assert scrape(None).status_code == 401
        assert scrape("wrong").status_code == 401
        assert scrape().status_code == 200


@pytest.mark.django_db(transaction=True)
@override_settings(OPERATIONS_METRICS_TOKEN=TOKEN)
def test_a_scrape_during_a_running_cluster_matches_the_ledger(api: ApiClient) -> None:
    # given a running worker-validator cluster: the worker's task done, the validator's claimed
    templates_load_builtin()
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    evaluations: list[float] = []
    engine.sandbox_observe(evaluations.append)
    before = samples()
    response = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": "Add it"}})
    assert response.status_code == 200, response.content
    worker = ScriptedWorker(
        api, {"worker": [{"summary": "done", "completionStatus": {"canValidate": True}}]}
    )
    assert worker.step() is not None
    claim = api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "runner-7"}).json()
    assert claim["task"]["agent_id"] == "validator"
    # and one more message published through the API, and a second task queued for no one
    published = api.post(
        f"/api/v1/clusters/{cluster_id}/messages",
        {"topic": "OPERATOR_NOTE", "sender": "op", "content": {"text": "hi"}},
    )
    assert published.status_code == 201, published.content

    # when scraped
    after = samples()

    # then every family is there, with the ledger's values
    cluster = Cluster.objects.get(pk=cluster_id)
    assert cluster.state == "running"
    assert after[("zeroshot_ledger_messages", (("cluster_state", "running"),))] == (
        cluster.last_sequence
    )
    # the counter moved by what the ledger recorded since the first scrape, family by family
    for family, count in by_family(cluster_id, after=0).items():
        key = ("zeroshot_messages_published_total", (("topic_family", family),))
        assert after[key] - before.get(key, 0.0) == count, family
    states = Counter(Task.objects.values_list("state", flat=True))
    assert states == {"completed": 1, "claimed": 1}
    for state in ("queued", "claimed", "completed", "failed", "cancelled"):
        assert after[("zeroshot_tasks", (("state", state),))] == states.get(state, 0)
    # the registry's runners that claimed lately: the scripted worker ("test") and runner-7
    assert after[("zeroshot_runners_seen", ())] == 2
    assert after[("zeroshot_task_leases_expired", ())] == 0
    assert after[("zeroshot_task_retries_open", ())] == 0
    assert after[("zeroshot_pipeline_lag_messages", ())] == 0
    assert after[("zeroshot_pipeline_lagging_clusters", ())] == 0
    count = ("zeroshot_publish_seconds_count", ())
    assert after[count] - before.get(count, 0.0) == 1
    assert ("zeroshot_websocket_connections", ()) in after
    assert not [k for k in after if ("cluster", cluster_id) in k[1]]  # no cluster id label
    # the context builds: one per claim, their latency counted, their estimated tokens summed
    builds = list(ContextBuild.objects.values_list("final_tokens", flat=True))
    assert len(builds) == 2

    def moved(name: str, *labels: tuple[str, str]) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    recorded = ("kind", "recorded")
    assert moved("zeroshot_context_build_seconds_count", recorded) == 2
    assert moved("zeroshot_context_build_seconds_sum", recorded) > 0
    assert moved("zeroshot_context_build_tokens_count", recorded) == 2
    assert moved("zeroshot_context_build_tokens_sum", recorded) == sum(builds)
    # the tokens the model billed: the worker's completion reported 1200 in, 300 out
    billed = Task.objects.get(state="completed").usage
    assert moved("zeroshot_model_tokens_total", ("direction", "input")) == billed["inputTokens"]
    assert moved("zeroshot_model_tokens_total", ("direction", "output")) == billed["outputTokens"]
    # the sandbox: each evaluation of the cluster's logic scripts, and the pool as it is
    assert evaluations, "the template's logic scripts ran in the sandbox"
    assert moved("zeroshot_sandbox_evaluation_seconds_count") == len(evaluations)
    assert moved("zeroshot_sandbox_evaluation_seconds_sum") == pytest.approx(sum(evaluations))
    pool = engine.sandbox_pool_stats()
    assert after[("zeroshot_sandbox_pool", (("kind", "size"),))] == pool.size
    assert after[("zeroshot_sandbox_pool", (("kind", "processes"),))] == pool.processes >= 1
    assert after[("zeroshot_sandbox_pool", (("kind", "busy"),))] == 0
    assert after[("zeroshot_pipeline_oldest_undispatched_age_seconds", ())] == 0

    # when the validator's lease runs out after retries, a task waits, and the pipeline lags
    Task.objects.filter(state="claimed").update(lease_expires_at=1, attempts=3)
    lease_look.now()  # behind this process's back: its next claim looks
    Task.objects.create(
        id="task_" + "0" * 32,
        cluster_id=cluster_id,
        agent_id="worker",
        iteration=9,
        trigger_message_id="m-x",
        trigger_topic="T",
        trigger_sequence=1,
        created_at=1_000,
        available_at=1_000,
    )
    Cluster.objects.filter(pk=cluster_id).update(
        pipeline_sequence=cluster.last_sequence - 3, labels={"pool": "gpu"}
    )
    with override_settings(OPERATIONS_METRICS_CLUSTER_LABELS=True):
        later = samples()

    # then the scrape says so
    assert later[("zeroshot_task_leases_expired", ())] == 1
    assert later[("zeroshot_task_retries_open", ())] == 2
    queue = (("agent", "worker"), ("pool", "gpu"))  # the cluster's pool label
    assert later[("zeroshot_queue_depth", queue)] == 1
    assert later[("zeroshot_queue_oldest_age_seconds", queue)] > 1_700_000_000
    assert later[("zeroshot_pipeline_lag_messages", ())] == 3
    assert later[("zeroshot_pipeline_lagging_clusters", ())] == 1
    assert later[("zeroshot_pipeline_lag_messages_by_cluster", (("cluster", cluster_id),))] == 3
    # the oldest message the pipeline has not offered has waited since it was committed
    first_undispatched = message_query(cluster_id=cluster_id, limit=None)[-3].timestamp
    age = later[("zeroshot_pipeline_oldest_undispatched_age_seconds", ())]
    assert (
        (now_ms() - first_undispatched) / 1000 - 5 < age <= (now_ms() - first_undispatched) / 1000
    )


@pytest.mark.django_db(transaction=True)  # the pipeline runs as each publish commits
@override_settings(OPERATIONS_METRICS_TOKEN=TOKEN)
def test_triggers_waiting_for_a_busy_agent_are_counted(api: ApiClient) -> None:
    # given the worker-validator's worker busy with its task, and two more ISSUE_OPENED for it
    templates_load_builtin()
    cluster_id = cluster_create_from_template(template_name="worker-validator", params={}).id
    response = api.post(f"/api/v1/clusters/{cluster_id}/start", {"issue": {"text": "Add it"}})
    assert response.status_code == 200, response.content
    assert api.post("/api/v1/tasks/claim", {"wait": 0}).status_code == 200
    for _ in range(2):
        published = api.post(
            f"/api/v1/clusters/{cluster_id}/messages",
            {"topic": "ISSUE_OPENED", "sender": "op", "content": {"text": "and this"}},
        )
        assert published.status_code == 201, published.content
    # then the scrape counts them where queued tasks behind a running one used to be counted
    after = samples()
    assert after[("zeroshot_triggers_waiting", (("agent", "worker"), ("pool", "default")))] == 2
    assert ("zeroshot_queue_depth", (("agent", "worker"), ("pool", "default"))) not in after


def test_open_websockets_are_counted_until_they_close() -> None:
    async def accepting(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "websocket.accept"})
        while (await receive())["type"] != "websocket.disconnect":
            pass

    async def scenario() -> tuple[float, float, float]:
        start = WEBSOCKETS._value.get()
        communicator = WebsocketCommunicator(WebsocketCounter(accepting), "/ws/x/")
        connected, _ = await communicator.connect(timeout=CONNECT_TIMEOUT)
        assert connected
        open_now = WEBSOCKETS._value.get()
        await communicator.disconnect()
        return start, open_now, WEBSOCKETS._value.get()

    start, open_now, closed = asyncio.run(scenario())
    assert (open_now, closed) == (start + 1, start)


@pytest.mark.django_db(transaction=True)
@override_settings(OPERATIONS_METRICS_TOKEN=TOKEN)
def test_a_batch_is_counted_once_per_topic_family(
    cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given the published counter's increments of two families watched
    children = {f: MESSAGES_PUBLISHED.labels(topic_family=f) for f in ("issue", "agent")}
    kind = type(children["issue"])
    counted = kind.inc
    increments: list[tuple[str, float]] = []

    def inc(child: Any, amount: float = 1) -> None:
        increments.extend((f, amount) for f, c in children.items() if c is child)
        counted(child, amount)

    monkeypatch.setattr(kind, "inc", inc)
    before = samples()
    # when a batch of 100 messages of the two families is published
    drafts = [MessageDraft(topic="ISSUE_OPENED", sender="s") for _ in range(60)] + [
        MessageDraft(topic="AGENT_OUTPUT", sender="s") for _ in range(40)
    ]
    message_publish_batch(cluster_id=cluster, drafts=drafts)
    # then each family's counter moved by its messages, in one increment each
    assert sorted(increments) == [("agent", 40), ("issue", 60)]
    after = samples()
    for family, count in (("issue", 60), ("agent", 40)):
        key = ("zeroshot_messages_published_total", (("topic_family", family),))
        assert after[key] - before.get(key, 0.0) == count


@pytest.mark.django_db(transaction=True)
def test_with_a_multiprocess_directory_a_scrape_adds_up_every_process(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "zeroshot_web.test_settings",
        "ZEROSHOT_DATA_DIR": str(tmp_path / "data"),
    }
    count = (
        "import django; django.setup(); from ledger.records import MessageRecord; "
        "from operations.metrics import count_published; "
        "count_published([MessageRecord(cluster_id='c', sequence=1, id='m', timestamp=1, "
        "topic='ISSUE_OPENED', sender='s', receiver='broadcast', content={}, metadata=None)])"
    )
    scrape_code = (
        "import django; django.setup(); from operations.metrics import metrics_exposition; "
        "print(metrics_exposition().decode())"
    )
    for _ in range(2):
        subprocess.run([sys.executable, "-c", count], cwd=REPO, env=env, check=True, timeout=60)
    out = subprocess.run(
        [sys.executable, "-c", scrape_code],
        cwd=REPO,
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
    ).stdout
    values = {
        (s.name, json.dumps(s.labels, sort_keys=True)): s.value
        for family in text_string_to_metric_families(out)
        for s in family.samples
    }
    assert values[("zeroshot_messages_published_total", '{"topic_family": "issue"}')] == 2
    assert ("zeroshot_tasks", '{"state": "queued"}') in values


@pytest.mark.django_db
@override_settings(OPERATIONS_METRICS_TOKEN=TOKEN)
def test_runners_seen_counts_the_registry_s_recent_runners_not_task_holders() -> None:
    # given a runner idling now (no task held) and one last seen an hour ago
    now = now_ms()
    Runner.objects.create(name="idle", first_seen_at=now, last_seen_at=now)
    Runner.objects.create(name="gone", first_seen_at=now - 3_600_000, last_seen_at=now - 3_600_000)
    # then only the recent one counts
    assert samples()[("zeroshot_runners_seen", ())] == 1


@override_settings(OPERATIONS_METRICS_TOKEN=TOKEN, OPERATIONS_METRICS_CLUSTER_LABELS=True)
def test_a_scrape_reads_a_fixed_number_of_queries_however_many_clusters_and_tasks(
    django_assert_num_queries: Any,
) -> None:
    # given clusters with queued tasks in two pools, all lagging behind
    for n, pool in enumerate(("gpu", "cpu", "gpu")):
        cluster = Cluster.objects.create(
            id=f"c{n}", created_at=1, state="running", labels={"pool": pool}
        )
        Task.objects.create(
            id=f"task_{n:032d}",
            cluster=cluster,
            agent_id="worker",
            iteration=1,
            trigger_message_id=f"m{n}",
            trigger_topic="T",
            trigger_sequence=1,
            created_at=1_000,
            available_at=1_000,
        )
    # then one query per family read from the database: messages, tasks, queues, triggers
    # waiting in buffers, leases, retries, runners, lag
    with django_assert_num_queries(8):
        found = samples()
    assert found[("zeroshot_queue_depth", (("agent", "worker"), ("pool", "gpu")))] == 2
    assert found[("zeroshot_queue_depth", (("agent", "worker"), ("pool", "cpu")))] == 1
