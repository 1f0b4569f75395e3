"""The work API client against a fake server: shapes, 204/409, retries and backoff."""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime

import httpx
import pytest

from tests.runner.work_api_fake import FakeWorkApi
from zeroshot_runner.backoff import Backoff, retry_after_seconds
from zeroshot_runner.client import (
    MAX_OUTPUT_CHARS,
    ApiError,
    LeaseLost,
    Unavailable,
    WorkClient,
    api_base_url,
)
from zeroshot_runner.records import Completed, Usage, claim_from_wire

FAST = Backoff(attempts=4, base=0.001, cap=0.01)


def client_for(
    fake: FakeWorkApi, *, key: str = "test-key", sleeper: Callable[[float], None] = time.sleep
) -> WorkClient:
    return WorkClient(url=fake.url, key=key, backoff=FAST, finish_backoff=FAST, sleeper=sleeper)


def test_claim_sends_the_filters_and_reads_the_task(work_api: FakeWorkApi) -> None:
    # given a queued task for a validator agent with a JSON schema and a timeout
    task_id = work_api.add_task(
        agent_id="validator",
        role="validator",
        iteration=2,
        prompt="Check the change.",
        model="sonnet",
        outputFormat="json",
        jsonSchema={"type": "object"},
        timeout=90_000,
    )
    client = client_for(work_api)

    # when
    claim = client.claim(
        worker="host:1", wait=0, lease=45, cluster="c1", agents=["validator"], roles=["validator"]
    )

    # then the request carried the filters, the lease and the key
    (request,) = work_api.seen("/tasks/claim")
    assert request.body == {
        "worker": "host:1",
        "wait": 0,
        "lease": 45,
        "cluster": "c1",
        "agents": ["validator"],
        "roles": ["validator"],
    }
    assert request.headers["Authorization"] == "Bearer test-key"
    # and the claim holds the task, its lease and its agent
    assert claim is not None
    assert claim.task_id == task_id
    assert claim.lease_id == work_api.tasks[task_id].lease_id
    assert (claim.agent_id, claim.iteration, claim.cluster_id) == ("validator", 2, "c1")
    assert claim.prompt == "Check the change."
    assert claim.agent.role == "validator"
    assert claim.agent.model == "sonnet"
    assert claim.agent.timeout_ms == 90_000
    assert claim.agent.wants_json is True
    assert claim.agent.config["jsonSchema"] == {"type": "object"}


def test_claim_leaves_out_filters_that_are_not_given(work_api: FakeWorkApi) -> None:
    client_for(work_api).claim(worker="w", wait=0, lease=60)

    (request,) = work_api.seen("/tasks/claim")
    assert request.body == {"worker": "w", "wait": 0, "lease": 60}


def test_claim_returns_none_when_the_server_has_nothing(work_api: FakeWorkApi) -> None:
    assert client_for(work_api).claim(worker="w", wait=0.05, lease=60) is None
    assert [r.status for r in work_api.seen("/tasks/claim")] == [204]


def test_complete_sends_result_output_and_usage(work_api: FakeWorkApi) -> None:
    # given a claimed task
    task_id = work_api.add_task()
    client = client_for(work_api)
    claim = client.claim(worker="w", wait=0, lease=60)
    assert claim is not None

    # when
    client.complete(
        task_id,
        lease_id=claim.lease_id,
        completed=Completed(
            result={"approved": True},
            output='{"approved": true}',
            usage=Usage(input_tokens=10, output_tokens=2, model="m"),
        ),
    )

    # then
    (request,) = work_api.seen("/complete")
    assert request.body == {
        "lease_id": claim.lease_id,
        "result": {"approved": True},
        "output": '{"approved": true}',
        "usage": {"inputTokens": 10, "outputTokens": 2, "model": "m"},
    }
    assert work_api.tasks[task_id].state == "completed"


def test_a_huge_output_keeps_its_end(work_api: FakeWorkApi) -> None:
    task_id = work_api.add_task()
    client = client_for(work_api)
    claim = client.claim(worker="w", wait=0, lease=60)
    assert claim is not None
    output = "a" * 10 + "b" * MAX_OUTPUT_CHARS

    client.complete(task_id, lease_id=claim.lease_id, completed=Completed(result={}, output=output))

    assert work_api.tasks[task_id].output == "[10 characters cut]\n" + "b" * MAX_OUTPUT_CHARS


def test_output_and_fail_carry_the_lease(work_api: FakeWorkApi) -> None:
    task_id = work_api.add_task()
    client = client_for(work_api)
    claim = client.claim(worker="w", wait=0, lease=60)
    assert claim is not None

    client.output(task_id, lease_id=claim.lease_id, lines=["a", "b"], offset=0)
    client.fail(task_id, lease_id=claim.lease_id, error="boom", retryable=True)

    assert work_api.seen("/output")[0].body == {
        "lease_id": claim.lease_id,
        "lines": ["a", "b"],
        "offset": 0,
    }
    assert work_api.seen("/fail")[0].body == {
        "lease_id": claim.lease_id,
        "error": "boom",
        "retryable": True,
    }


def test_a_stale_lease_raises_lease_lost_and_is_not_retried(work_api: FakeWorkApi) -> None:
    # given a task whose lease the runner no longer holds
    task_id = work_api.add_task()
    client = client_for(work_api)

    # when / then
    with pytest.raises(LeaseLost) as raised:
        client.heartbeat(task_id, lease_id="not-the-lease")
    assert raised.value.status == 409
    assert raised.value.code == "lease_lost"
    assert len(work_api.seen("/heartbeat")) == 1


def test_a_503_is_retried_after_the_time_the_server_asks_for(work_api: FakeWorkApi) -> None:
    # given a server that answers the first heartbeat 503 with Retry-After: 2
    task_id = work_api.add_task()
    waits: list[float] = []
    client = client_for(work_api, sleeper=waits.append)
    claim = client.claim(worker="w", wait=0, lease=60)
    assert claim is not None
    work_api.inject("/heartbeat", 503, headers={"Retry-After": "2"})

    # when
    client.heartbeat(task_id, lease_id=claim.lease_id)

    # then it waited at least what was asked (plus at most the jitter) and asked again
    assert [r.status for r in work_api.seen("/heartbeat")] == [503, 200]
    assert len(waits) == 1
    assert 2.0 <= waits[0] <= 2.0 + FAST.base


@pytest.mark.parametrize("status", [429, 502, 504])
def test_other_transient_statuses_are_retried(work_api: FakeWorkApi, status: int) -> None:
    work_api.inject("/tasks/claim", status, times=2)
    waits: list[float] = []

    claim = client_for(work_api, sleeper=waits.append).claim(worker="w", wait=0, lease=60)

    assert claim is None
    assert [r.status for r in work_api.seen("/tasks/claim")] == [status, status, 204]
    assert len(waits) == 2


def test_a_retried_complete_whose_answer_was_lost_completes_once(work_api: FakeWorkApi) -> None:
    # given a server that applies the first complete but whose answer is lost (502)
    task_id = work_api.add_task()
    client = client_for(work_api, sleeper=lambda _: None)
    claim = client.claim(worker="w", wait=0, lease=60)
    assert claim is not None
    work_api.inject("/complete", 502, after=True)

    # when
    client.complete(
        task_id, lease_id=claim.lease_id, completed=Completed(result={"n": 1}, output="x")
    )

    # then the retry sent the same body, and the server answered it as the same completion
    first, second = work_api.seen("/complete")
    assert (first.status, second.status) == (502, 200)
    assert first.body == second.body
    assert work_api.tasks[task_id].state == "completed"


def test_a_refused_key_is_an_error_that_is_not_retried(work_api: FakeWorkApi) -> None:
    client = client_for(work_api, key="wrong")

    with pytest.raises(ApiError) as raised:
        client.claim(worker="w", wait=0, lease=60)
    assert raised.value.status == 401
    assert not isinstance(raised.value, LeaseLost)
    assert len(work_api.requests) == 1


def test_an_unreachable_server_is_retried_then_reported_unavailable() -> None:
    # given a port where nothing listens
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    waits: list[float] = []
    client = WorkClient(url=f"http://127.0.0.1:{port}", key="k", backoff=FAST, sleeper=waits.append)

    # when / then
    with pytest.raises(Unavailable) as raised:
        client.cluster_state("c1")
    assert "ConnectError" in str(raised.value)
    assert len(waits) == FAST.attempts - 1


def test_the_cluster_state_is_read(work_api: FakeWorkApi) -> None:
    work_api.cluster_state = "completed"

    assert client_for(work_api).cluster_state("c1") == "completed"


def test_the_api_root_is_found_with_or_without_its_path() -> None:
    assert api_base_url("http://h:8000") == "http://h:8000/api/v1"
    assert api_base_url("http://h:8000/") == "http://h:8000/api/v1"
    assert api_base_url("https://h/api/v1/") == "https://h/api/v1"


def test_backoff_draws_full_jitter_under_a_growing_cap() -> None:
    backoff = Backoff(base=0.5, cap=4.0)
    rng = random.Random(7)

    draws = {attempt: [backoff.delay(attempt, rng=rng) for _ in range(200)] for attempt in range(6)}

    for attempt, values in draws.items():
        ceiling = min(4.0, 0.5 * 2**attempt)
        assert all(0.0 <= value <= ceiling for value in values)
        # Full jitter spreads over the whole range, not just near its top.
        assert min(values) < ceiling * 0.1
        assert max(values) > ceiling * 0.9


def test_retry_after_is_read_as_seconds_or_as_a_date_and_capped() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    def answer(value: str) -> httpx.Response:
        return httpx.Response(503, headers={"Retry-After": value})

    assert retry_after_seconds(answer("3")) == 3.0
    assert retry_after_seconds(answer("Wed, 01 Jan 2025 12:00:10 GMT"), now=now) == 10.0
    assert retry_after_seconds(answer("soon")) is None
    assert retry_after_seconds(httpx.Response(503)) is None
    assert Backoff(max_retry_after=60.0, base=0.0).delay(0, retry_after=3600.0) == 60.0


def test_the_claimed_tasks_cluster_is_read_from_the_servers_cluster_id() -> None:
    # the server's TaskOut names the field cluster_id
    claim = claim_from_wire(
        {
            "task": {"id": "t1", "lease_id": "l1", "cluster_id": "login", "agent_id": "worker"},
            "prompt": "Work.",
            "agent": {"id": "worker", "role": "worker"},
        }
    )
    assert claim.cluster_id == "login"
