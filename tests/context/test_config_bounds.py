"""Every number of a config is bounded at validation, and a template name fits a cluster
(issue 17, items 8 and 12): what a claim or a runner could not use is refused when it is given."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from context.services.templates import template_check, template_get, template_save
from context.services.templates import templates_load_builtin as load_builtin
from context.strategy import StrategyError, strategy_parse, strategy_validate
from ledger.errors import InvalidInput
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db

HUGE = 10**400


def worker(**extra: Any) -> dict[str, Any]:
    return {
        "id": "worker",
        "role": "implementation",
        "prompt": "Work.",
        "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
        "contextStrategy": {"sources": [{"topic": "ISSUE_OPENED", "amount": 1}]},
        **extra,
    }


def with_strategy(**strategy: Any) -> dict[str, Any]:
    agent = worker()
    agent["contextStrategy"] = {**agent["contextStrategy"], **strategy}
    return agent


@pytest.mark.parametrize("max_tokens", [3_000_000_000, 2**63, HUGE, 1e300])
def test_a_strategy_with_a_max_tokens_past_its_bound_is_invalid(max_tokens: Any) -> None:
    report = strategy_validate({"sources": [], "maxTokens": max_tokens})
    assert not report.valid
    assert report.errors[0].field == "maxTokens"
    assert "between 1 and" in report.errors[0].message
    with pytest.raises(StrategyError):
        strategy_parse({"sources": [], "maxTokens": max_tokens})


@pytest.mark.parametrize("field", ["amount", "limit", "compactAmount"])
def test_a_source_count_past_its_bound_is_invalid(field: str) -> None:
    report = strategy_validate({"sources": [{"topic": "A", field: 3_000_000_000}]})
    assert [issue.field for issue in report.errors] == [field]


def test_a_numeric_since_past_the_last_timestamp_is_invalid() -> None:
    report = strategy_validate({"sources": [{"topic": "A", "since": 1e300}]})
    assert [issue.field for issue in report.errors] == ["since"]


@pytest.mark.parametrize(
    ("agent", "field"),
    [
        (with_strategy(maxTokens=3_000_000_000), "maxTokens"),
        (worker(timeout=HUGE), "timeout"),
        (worker(timeout=-1), "timeout"),
        (worker(maxIterations=3_000_000_000), "maxIterations"),
        (worker(maxIterations=0), "maxIterations"),
        (worker(maxRetries=10**6), "maxRetries"),
        (worker(maxRetries="three"), "maxRetries"),
        (worker(triggers=[{"topic": "*_RESULT"}]), "topic"),
        (worker(triggers=[{"topic": "GO", "action": "explode"}]), "action"),
        (worker(hooks={"onComplete": "publish"}), "onComplete"),
        (worker(outputFormat="yaml"), "outputFormat"),
    ],
)
def test_a_config_past_its_bounds_is_refused_at_creation(
    api: ApiClient, agent: dict[str, Any], field: str
) -> None:
    # when a cluster is created with the config
    response = api.post("/api/v1/clusters", {"config": {"agents": [agent]}})
    # then it is refused with a message naming the field, and nothing is created
    assert response.status_code == 422, response.content
    assert field in response.json()["message"]
    assert api.get("/api/v1/clusters").json() == []


@pytest.mark.parametrize(
    ("agent", "field"),
    [
        (with_strategy(maxTokens=3_000_000_000), "maxTokens"),
        (worker(timeout=HUGE), "timeout"),
        (worker(maxIterations=2**40), "maxIterations"),
    ],
)
def test_a_template_past_its_bounds_is_invalid_and_not_saved(
    agent: dict[str, Any], field: str
) -> None:
    body = {"name": "t", "agents": [agent]}
    check = template_check(body)
    assert not check.valid
    assert any(field in str(error["message"]) for error in check.errors)
    with pytest.raises(InvalidInput):
        template_save(name="t", body=body)


def test_a_template_param_past_its_bound_is_refused_when_a_cluster_is_made(
    api: ApiClient,
) -> None:
    load_builtin()
    response = api.post(
        "/api/v1/clusters",
        {"template": "worker-validator", "params": {"max_tokens": 3_000_000_000}},
    )
    assert response.status_code == 422, response.content
    assert "maxTokens" in response.json()["message"]
    timeout = api.post(
        "/api/v1/clusters", {"template": "worker-validator", "params": {"timeout": HUGE}}
    )
    assert timeout.status_code == 422, timeout.content
    assert api.get("/api/v1/clusters").json() == []


@pytest.mark.parametrize("length", [129, 200])
def test_a_template_name_longer_than_a_cluster_keeps_is_refused_at_save(length: int) -> None:
    load_builtin()
    body = copy.deepcopy(template_get(name="single-worker").body)
    with pytest.raises(InvalidInput) as refused:
        template_save(name="t" * length, body=body)
    assert refused.value.details == {"field": "name"}
    # and one of 128 saves, and launches
    saved = template_save(name="t" * 128, body=body)
    assert saved.status == "created"
