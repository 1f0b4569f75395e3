"""``POST /api/v1/tasks/<id>/complete|heartbeat|fail`` with a bearer key, answered in front of
Django.

A completion through Django crossed its whole middleware chain on a thread of its own, then
Ninja's parser, schema and response validation, for an answer that needs none of the chain
(bench/results/cpu-task-cycle.md names the costs). This route does what the Ninja endpoints of
``runs.api`` do, with the same code — the key check and rate limit of the claim route
(``zeroshot_web.claims``), ``BoundedJsonParser``, ``CompleteIn``/``LeaseIn``/``FailIn``, the
key's scope passed to the service as ``scoped_cluster`` gives it, ``task_complete`` /
``task_heartbeat`` / ``task_fail`` on the long-lived database threads, ``TaskOut`` for the task
and the records' wire shape for the messages (which ``MessageOut`` passes through unchanged),
the error shape and the headers Django's middleware adds — with one thread hop. Anything else
(a session, a query string, a path Django would refuse) goes on to Django, whose endpoints stay
and describe the routes in the OpenAPI schema. docs/decisions/0170-lease-route.md.
"""

from __future__ import annotations

import re
from typing import Any

from ledger.errors import ServiceError
from ledger.keys import ApiKeyIdentity
from ledger.threads import in_database
from runs import services
from runs.api import CompleteIn, FailIn, LeaseIn, TaskOut
from zeroshot_web.claims import Answer, BearerRoute, _parsed, _validated, shaped

# Ninja's path parameter: one segment, any character but a slash.
PATH = re.compile(r"/api/v1/tasks/([^/]+)/(complete|heartbeat|fail)")
SCHEMAS: dict[str, type[LeaseIn]] = {"complete": CompleteIn, "heartbeat": LeaseIn, "fail": FailIn}


class LeaseRoute(BearerRoute):
    """Bearer-key completions, heartbeats and failures are answered here."""

    path = PATH

    async def answer(
        self, match: re.Match[str], body: bytes, identity: ApiKeyIdentity, arrived: float
    ) -> Answer:
        call, task_id = match.group(2), match.group(1)
        payload: Any = _validated(SCHEMAS[call], _parsed(body))
        try:
            done = await in_database(_run)(call, task_id, payload, identity.cluster_id)
        except ServiceError as error:
            raise Answer(error.status, error.to_dict()) from None
        return Answer(200, done)


def _run(call: str, task_id: str, payload: Any, scope: str | None) -> dict[str, Any]:
    """The endpoint's service call and its answer (``runs.api``), on a database thread."""
    if call == "heartbeat":
        task = services.task_heartbeat(task_id=task_id, lease_id=payload.lease_id, scope=scope)
        return _task_out(task.to_wire(), exclude_unset=False)
    if call == "fail":
        failed = services.task_fail(
            task_id=task_id,
            lease_id=payload.lease_id,
            error=payload.error,
            retryable=payload.retryable,
            scope=scope,
        )
        return _task_out(failed.to_wire(), exclude_unset=False)
    usage = payload.usage.model_dump(exclude_none=True) if payload.usage is not None else None
    completion = services.task_complete(
        task_id=task_id,
        lease_id=payload.lease_id,
        result=payload.result,
        output=payload.output,
        usage=usage,
        scope=scope,
    )
    return {
        "task": _task_out(completion.task.to_wire(), exclude_unset=True),
        "messages": [m.to_wire() for m in completion.messages],
    }


def _task_out(wire: dict[str, Any], *, exclude_unset: bool) -> dict[str, Any]:
    """The task as the endpoint's ``TaskOut`` answers it (``exclude_unset`` as the endpoint)."""
    return shaped(TaskOut, wire, exclude_unset=exclude_unset)
