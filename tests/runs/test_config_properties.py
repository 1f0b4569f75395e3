"""Random agent configs and templates (issue 17, acceptance): each is either refused at
validation with a 4xx, or it validates and runs: the cluster is created and started through the
API and the task its issue triggers can be claimed and completed. Never a 500, never a task
that no claim can take."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from context.agents import AgentConfigError, agents_parse
from context.services.templates import template_save
from runs.models import Task
from tests.conftest import ApiClient

pytestmark = pytest.mark.django_db(transaction=True)

_ids = itertools.count()


# Numbers within their bounds, and numbers beyond them of every JSON type.
good_numbers = st.integers(min_value=1, max_value=50)
bad_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 3_000_000_000, 2**31, 2**63, 10**400, 10**20]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from(["5", "lots", "", True, False, None, [], {}]),
)
good_topics = st.sampled_from(["ISSUE_OPENED", "*", "ISSUE_*", "PLAN_READY"])
good_actions = st.sampled_from(["execute_task", "execute_task", "stop_cluster"])


def nested(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = {"a": value}
    return value


# What a defect puts in place of a valid field: wrong types, huge numbers, deep nesting.
DEFECTS: dict[str, st.SearchStrategy[Any]] = {
    "id": st.sampled_from(["bad id", "", 5, None]),
    "role": st.sampled_from([3, [], {"a": 1}]),
    "prompt": st.one_of(st.builds(nested, st.integers(1, 80)), st.sampled_from([3, []])),
    "triggers": st.one_of(
        st.sampled_from([None, "ISSUE_OPENED", {}, [3]]),
        st.lists(
            st.fixed_dictionaries(
                {
                    "topic": st.sampled_from(["*_OPENED", "issue_opened", "", 7, None]),
                    "action": st.sampled_from(["explode", None, 3, "execute_task"]),
                }
            ),
            min_size=1,
            max_size=2,
        ),
    ),
    "maxIterations": bad_numbers,
    "maxRetries": bad_numbers,
    "timeout": bad_numbers,
    "contextStrategy": st.one_of(
        st.builds(lambda n: {"sources": [], "maxTokens": n}, bad_numbers),
        st.builds(lambda n: {"sources": [{"topic": "ISSUE_OPENED", "amount": n}]}, bad_numbers),
        st.sampled_from([[], "all", {"sources": "all"}]),
    ),
    "outputFormat": st.sampled_from(["yaml", 1, []]),
    "hooks": st.sampled_from(
        [
            {"onComplete": {"action": "publish_message", "config": []}},
            {"onComplete": "publish"},
            {"onComplete": {"config": {"topic": "DONE", "n": 10**400}}},
            {"onComplete": {"transform": {"script": 5}}},
        ]
    ),
}


@st.composite
def agents(draw: st.DrawFn, index: int) -> dict[str, Any]:
    """A valid agent, then at most two of its fields replaced by a defect."""
    agent: dict[str, Any] = {
        "id": f"agent-{index}",
        "role": draw(st.sampled_from(["implementation", "validator"])),
        "prompt": draw(st.sampled_from(["Work.", {"system": "Work."}, {"initial": "Go."}])),
        "triggers": draw(
            st.lists(
                st.fixed_dictionaries({"topic": good_topics, "action": good_actions}),
                min_size=1,
                max_size=2,
            )
        ),
    }
    for field in ("maxIterations", "maxRetries", "timeout"):
        if draw(st.booleans()):
            agent[field] = draw(good_numbers)
    if draw(st.booleans()):
        agent["contextStrategy"] = {
            "sources": [{"topic": "ISSUE_OPENED", "amount": draw(good_numbers)}],
            "maxTokens": draw(st.integers(min_value=100, max_value=10_000_000)),
        }
    if draw(st.booleans()):
        agent["outputFormat"] = draw(st.sampled_from(["json", "text"]))
    if draw(st.booleans()):
        agent["hooks"] = {"onComplete": {"action": "publish_message", "config": {"topic": "DONE"}}}
    for field in draw(st.lists(st.sampled_from(sorted(DEFECTS)), max_size=2, unique=True)):
        agent[field] = draw(DEFECTS[field])
    return agent


configs = st.integers(min_value=1, max_value=3).flatmap(
    lambda n: st.tuples(*(agents(i) for i in range(n)))
)


def expects_task(config_agents: tuple[dict[str, Any], ...]) -> bool:
    """Whether ISSUE_OPENED queues a task: the first agent whose trigger matches decides."""
    for agent in agents_parse(list(config_agents)):
        trigger = next((t for t in agent.triggers if t.matches("ISSUE_OPENED")), None)
        if trigger is None:
            continue
        return trigger.action != "stop_cluster"
    return False


def run(api: ApiClient, created: Any, agents_given: tuple[dict[str, Any], ...]) -> None:
    """A cluster that was created runs: it starts, and its issue's task can be taken."""
    assert created.status_code == 201, created.content
    cluster_id = created.json()["id"]
    started = api.post(
        f"/api/v1/clusters/{cluster_id}/start", {"issue": {"title": "t", "text": "Do it."}}
    )
    assert started.status_code == 200, started.content
    claim = api.post("/api/v1/tasks/claim", {"wait": 0, "cluster": cluster_id})
    assert claim.status_code in (200, 204), claim.content
    if claim.status_code == 200:
        task = claim.json()["task"]
        done = api.post(
            f"/api/v1/tasks/{task['id']}/complete",
            {"lease_id": task["lease_id"], "result": {"summary": "done"}},
        )
        assert done.status_code in (200, 422), done.content
    else:
        # nothing to take: the issue triggered no task, or the cluster ended, and said why
        state = api.get(f"/api/v1/clusters/{cluster_id}").json()["state"]
        assert not expects_task(agents_given) or state in ("completed", "failed"), state
    # nothing is left claimed, nor queued in a cluster that no longer runs
    state = api.get(f"/api/v1/clusters/{cluster_id}").json()["state"]
    open_tasks = Task.objects.filter(cluster_id=cluster_id, state__in=("queued", "claimed"))
    assert not open_tasks.filter(state="claimed").exists()
    if state != "running":
        assert not open_tasks.exists()


def refused(response: Any) -> bool:
    return 400 <= response.status_code < 500 and response.json()["code"] != "internal_error"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(config_agents=configs)
def test_a_random_config_is_refused_at_validation_or_runs(
    api: ApiClient, config_agents: tuple[dict[str, Any], ...]
) -> None:
    created = api.post("/api/v1/clusters", {"config": {"agents": list(config_agents)}})
    assert created.status_code < 500, created.content
    if created.status_code == 201:
        run(api, created, config_agents)
    else:
        assert refused(created), created.content
        # what was refused is what the typed model, or the ledger's storage bounds, refuse
        if created.json()["details"].get("field", "").startswith("agents"):
            with pytest.raises(AgentConfigError):
                agents_parse(list(config_agents))


def template_agent(agent: dict[str, Any]) -> dict[str, Any]:
    """A template requires each trigger's action; a defect that is no trigger stays one."""
    triggers = agent.get("triggers")
    if isinstance(triggers, list):
        agent = {
            **agent,
            "triggers": [
                {**t, "action": t.get("action") or "execute_task"} if isinstance(t, dict) else t
                for t in triggers
            ],
        }
    return agent


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(config_agents=configs, max_tokens=st.one_of(good_numbers, bad_numbers))
def test_a_random_template_is_invalid_at_validation_or_runs(
    api: ApiClient, config_agents: tuple[dict[str, Any], ...], max_tokens: Any
) -> None:
    agents_given = tuple(template_agent(a) for a in config_agents)
    body = {
        "name": "random",
        "params": {"max_tokens": {"type": "integer", "default": 100000}},
        "agents": list(agents_given),
    }
    checked = api.post("/api/v1/templates/validate", {"template": body})
    if checked.status_code != 200:
        assert refused(checked), checked.content  # a body no template may hold (too deep)
        return
    if not checked.json()["valid"]:
        return
    name = f"random-{next(_ids)}"
    template_save(name=name, body=body)
    created = api.post("/api/v1/clusters", {"template": name, "params": {"max_tokens": max_tokens}})
    assert created.status_code < 500, created.content
    if created.status_code == 201:
        run(api, created, agents_given)
    else:
        assert refused(created), created.content
