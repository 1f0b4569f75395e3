"""The openai provider against a local fake of an OpenAI-compatible endpoint."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runner.helpers import claim_for, job_for
from tests.runner.openai_fake import FakeOpenAI, completion
from zeroshot_runner.backoff import Backoff
from zeroshot_runner.providers.openai import OpenAIProvider
from zeroshot_runner.records import Completed, Failed, Usage

FAST = Backoff(attempts=3, base=0.001, cap=0.01)


@pytest.fixture
def endpoint() -> Iterator[FakeOpenAI]:
    with FakeOpenAI(completion('Here you go: {"approved": true}')).running() as fake:
        yield fake


def provider_for(
    endpoint: FakeOpenAI, *, model: str | None = "local-model", key: str | None = "sk-test"
) -> OpenAIProvider:
    return OpenAIProvider(
        base_url=endpoint.url, model=model, api_key=key, default_timeout=10.0, backoff=FAST
    )


def test_the_prompt_is_the_user_message_and_usage_comes_back(endpoint: FakeOpenAI) -> None:
    # given a JSON agent
    job, lines = job_for(claim_for(prompt="Review the change."))

    # when
    outcome = provider_for(endpoint).run(job)

    # then the endpoint got the prompt as the user message, in JSON mode, with the key
    ((path, headers, body),) = endpoint.requests
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer sk-test"
    assert body == {
        "model": "local-model",
        "messages": [{"role": "user", "content": "Review the change."}],
        "response_format": {"type": "json_object"},
    }
    # and the answer became the result, its usage the task's usage
    assert outcome == Completed(
        result={"approved": True},
        output='Here you go: {"approved": true}',
        usage=Usage(input_tokens=12, output_tokens=7, model="local-model-1"),
    )
    assert lines.lines == ['Here you go: {"approved": true}']


def test_a_text_agent_asks_for_no_json_and_the_agents_model_is_used(
    endpoint: FakeOpenAI,
) -> None:
    job, _ = job_for(claim_for(outputFormat="text", model="agent-model"))

    outcome = provider_for(endpoint, model=None, key=None).run(job)

    ((_, headers, body),) = endpoint.requests
    assert "response_format" not in body
    assert body["model"] == "agent-model"
    assert "Authorization" not in headers
    assert isinstance(outcome, Completed)
    assert outcome.result is None


def test_a_429_then_a_200_is_retried(endpoint: FakeOpenAI) -> None:
    endpoint.queue(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "0"})
    job, _ = job_for(claim_for())

    outcome = provider_for(endpoint).run(job)

    assert len(endpoint.requests) == 2
    assert isinstance(outcome, Completed)
    assert outcome.result == {"approved": True}


def test_server_errors_past_the_retries_fail_as_retryable(endpoint: FakeOpenAI) -> None:
    for _ in range(FAST.attempts):
        endpoint.queue(503, {"error": {"message": "overloaded"}})
    job, _ = job_for(claim_for())

    outcome = provider_for(endpoint).run(job)

    assert len(endpoint.requests) == FAST.attempts
    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "HTTP 503: overloaded" in outcome.error


def test_a_400_fails_the_task_for_good_with_the_endpoints_words(endpoint: FakeOpenAI) -> None:
    endpoint.queue(400, {"error": {"message": "Unknown model 'local-model'", "type": "invalid"}})
    job, _ = job_for(claim_for())

    outcome = provider_for(endpoint).run(job)

    assert len(endpoint.requests) == 1
    assert outcome == Failed(
        error="the model endpoint refused the request: HTTP 400: Unknown model 'local-model'",
        retryable=False,
    )


def test_an_answer_without_json_fails_a_json_agent_as_retryable_after_one_repair(
    endpoint: FakeOpenAI,
) -> None:
    endpoint.queue(200, completion("I cannot answer in JSON."))
    endpoint.queue(200, completion("Still no JSON, sorry."))
    job, lines = job_for(claim_for())

    outcome = provider_for(endpoint).run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is True
    assert "Still no JSON, sorry." in outcome.error
    assert "after 1 output repair" in outcome.error
    assert outcome.repairs == 1
    assert len(endpoint.requests) == 2
    assert any(line.startswith("[zeroshot-runner] output repair 1:") for line in lines.lines)


def test_a_repair_is_a_follow_up_in_the_same_conversation(endpoint: FakeOpenAI) -> None:
    # given an agent with a schema, whose first answer breaks it
    schema = {"type": "object", "required": ["approved"], "properties": {"approved": {}}}
    endpoint.queue(200, completion('{"verdict": "fine"}'))
    endpoint.queue(200, completion('{"approved": true}'))
    job, lines = job_for(claim_for(prompt="Review it.", jsonSchema=schema))

    # when
    outcome = provider_for(endpoint).run(job)

    # then the second request holds the question, the wrong answer and what is wrong
    assert isinstance(outcome, Completed)
    assert outcome.result == {"approved": True}
    assert outcome.repairs == 1
    messages = endpoint.requests[1][2]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[0]["content"] == "Review it."
    assert messages[1]["content"] == '{"verdict": "fine"}'
    assert "'approved' is a required property" in messages[2]["content"]
    assert '"required": [' in messages[2]["content"]
    assert lines.lines[-1] == "[zeroshot-runner] output repairs: 1; the answer is usable"


def test_without_any_model_the_task_fails_for_good(endpoint: FakeOpenAI) -> None:
    job, _ = job_for(claim_for())

    outcome = provider_for(endpoint, model=None).run(job)

    assert isinstance(outcome, Failed)
    assert outcome.retryable is False
    assert endpoint.requests == []
