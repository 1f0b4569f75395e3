"""Every operation of /api/v1/openapi.json, fed with generated input (Schemathesis): no server
error, no response outside its documented schema, no status the schema does not list, and
input the schema rules out is refused.

Bounded for CI: a fixed seed and at most ``EXAMPLES`` examples per operation and phase. Cases
with a ``cluster_id`` (or a template ``name``) are pointed at a seeded cluster half of the time,
so that the success paths run too, not only the 404s of random ids.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, seed, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from context.services import context_build
from ledger.keys import api_key_create
from ledger.services import MessageDraft, cluster_create, message_publish

pytestmark = pytest.mark.django_db

SEED = 20_260_209
EXAMPLES = 50
CLUSTER = "schema-run"
AGENTS = {
    "agents": [
        {
            "id": "worker",
            "role": "implementation",
            "prompt": "Do the work.",
            "triggers": [{"topic": "PLAN_READY", "action": "execute_task"}],
            "contextStrategy": {"sources": [{"topic": "PLAN_READY", "amount": 2}]},
        }
    ]
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(autouse=True)
def _connection_kept_open() -> Iterator[None]:
    # As Django's test client does: a request must not close the test's database connection.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def key(db: None) -> str:
    """A cluster with messages, a snapshot and a recorded build, and a key for everything."""
    cluster_create(cluster_id=CLUSTER, config=AGENTS, template="single-worker")
    for text in ("plan one", "plan two"):
        message_publish(
            cluster_id=CLUSTER,
            draft=MessageDraft(topic="PLAN_READY", sender="planner", content={"text": text}),
        )
    message_publish(
        cluster_id=CLUSTER,
        draft=MessageDraft(
            topic="STATE_SNAPSHOT", sender="state-snapshotter", content={"data": {"version": 1}}
        ),
    )
    context_build(cluster_id=CLUSTER, agent_id="worker")
    return api_key_create(name="schemathesis")[1]


def _half(case: Any, name: str) -> bool:
    """A stable coin per generated case: the same seed sends the same cases to the cluster."""
    text = repr((case.operation.label, case.path_parameters, case.query, case.body, name))
    return hashlib.sha256(text.encode()).digest()[0] % 2 == 0


# Read from the application itself, as a client reads it: the served document is what is tested.
api = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", get_wsgi_application())


@api.parametrize()
@seed(SEED)
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_api_keeps_its_schema(case: Any, key: str) -> None:
    # Only cases meant to be valid are pointed at the seeded data: a case meant to break the
    # schema must stay broken.
    if case.meta is not None and case.meta.generation.mode.is_positive:
        parameters = case.path_parameters or {}
        if "cluster_id" in parameters and _half(case, "cluster_id"):
            parameters["cluster_id"] = CLUSTER
        if "name" in parameters and _half(case, "name"):
            parameters["name"] = "single-worker"
        if isinstance(case.body, dict) and "agent_id" in case.body and _half(case, "agent_id"):
            case.body["agent_id"] = "worker"

    case.call_and_validate(headers={"Authorization": f"Bearer {key}"}, checks=CHECKS)
