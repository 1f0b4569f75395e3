"""The work API for agents (SPEC §7.4): claim tasks, report on them, start and stop clusters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connection
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.responses import Status
from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt, StringConstraints

from ledger import interfaces as ledger
from ledger.interfaces import (
    ClusterDetailOut,
    ClusterRecord,
    Forbidden,
    MessageOut,
    require_cluster,
    scoped_cluster,
)
from runs import selectors, services
from runs.models import TaskState
from runs.waiting import ClaimFilter, claim_waiting

router = Router(tags=["runs"])

WAIT_MAX = 30


class ErrorOut(Schema):
    code: str
    message: str
    details: Any = None


ERRORS = {
    400: ErrorOut,
    401: ErrorOut,
    403: ErrorOut,
    404: ErrorOut,
    409: ErrorOut,
    413: ErrorOut,
    422: ErrorOut,
}


class ClaimIn(Schema):
    model_config = ConfigDict(extra="forbid")

    cluster: str | None = Field(None, max_length=128)
    agents: list[str] = Field(default_factory=list, max_length=100)
    roles: list[str] = Field(default_factory=list, max_length=100)
    wait: StrictInt | StrictFloat = Field(0, ge=0, le=WAIT_MAX, description="seconds to wait")
    lease: StrictInt | StrictFloat | None = Field(None, ge=5, le=3600, description="seconds")
    worker: str = Field("", max_length=128, description="the runner's name (default host:pid)")
    labels: dict[str, str] = Field(
        default_factory=dict,
        description="runner pools: only tasks of clusters carrying every one of these labels",
    )
    providers: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default_factory=list,
        max_length=32,
        description="only tasks whose agent names one of these providers, or names none",
    )


class TriggerRefOut(Schema):
    id: str
    topic: str
    sequence: str


class TaskFieldsOut(Schema):
    id: str
    cluster_id: str
    agent_id: str
    role: str
    iteration: int
    state: str = Field(description="queued, claimed, completed, failed or cancelled (SPEC §7.3)")
    state_detail: str = Field(
        description="the task's own state: also expired (shown as queued: its lease ran out, "
        "it is claimable again) and dropped (shown as cancelled: its agent's buffer was full)"
    )
    triggering_message: TriggerRefOut
    build_id: int | None
    attempts: int
    lease_expires_at: int | None
    worker: str
    created_at: int
    claimed_at: int | None
    finished_at: int | None
    error: str | None = None
    usage: Any = None


class TaskOut(TaskFieldsOut):
    result: Any = None


class TaskSummaryOut(TaskFieldsOut):
    result_chars: int | None = Field(
        None, description="the size of the result: characters of its JSON"
    )
    result_preview: str | None = Field(
        None, description="the first characters of the result's JSON; all of it: GET /tasks/{id}"
    )


class ClaimedTaskOut(TaskOut):
    lease_id: str
    lease_seconds: int


class ClaimOut(Schema):
    task: ClaimedTaskOut
    prompt: str
    metrics: dict[str, Any]
    agent: dict[str, Any]


class LeaseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    lease_id: str = Field(min_length=1, max_length=40)


class OutputIn(LeaseIn):
    lines: list[str] = Field(max_length=1000)
    offset: StrictInt | None = Field(
        None, ge=0, description="lines this lease sent before these (to drop a repeated batch)"
    )


class UsageIn(Schema):
    inputTokens: StrictInt = Field(0, ge=0)
    outputTokens: StrictInt = Field(0, ge=0)
    model: str | None = Field(None, max_length=200)
    costUsd: StrictInt | StrictFloat | None = Field(None, ge=0)


class CompleteIn(LeaseIn):
    result: dict[str, Any] | str | None = None
    output: str = Field("", max_length=2_000_000)
    usage: UsageIn | None = None


class FailIn(LeaseIn):
    error: str = Field(min_length=1, max_length=100_000)
    retryable: StrictBool = True


class CompletionOut(Schema):
    task: TaskOut
    messages: list[MessageOut]


class TaskPageOut(Schema):
    items: list[TaskSummaryOut]
    next_before: str | None


class TaskQueryIn(Schema):
    agent: str | None = Field(None, max_length=64)
    state: TaskState | None = Field(
        None,
        description="queued also lists expired tasks, cancelled also dropped ones; expired and "
        "dropped list only themselves",
    )
    before: str | None = Field(None, max_length=40, description="id of the last task of a page")
    limit: int = Field(selectors.DEFAULT_PAGE, ge=1, le=selectors.MAX_PAGE)


class IssueIn(Schema):
    title: str = Field("", max_length=300)
    text: str = Field(min_length=1, max_length=100_000)


class StartIn(Schema):
    model_config = ConfigDict(extra="forbid")

    issue: IssueIn


class GuidanceIn(Schema):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1,
        max_length=services.GUIDANCE_TEXT_MAX,
        description="what the agents are to take into account; not only whitespace",
    )
    agent: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="one agent of the cluster (`USER_GUIDANCE_AGENT`); none: every agent "
        "(`USER_GUIDANCE_CLUSTER`)",
    )


@router.post(
    "/tasks/claim",
    response={200: ClaimOut, 204: None, **ERRORS},
    summary="Claim a task (long-polls up to `wait` seconds)",
)
async def tasks_claim(request: HttpRequest, payload: ClaimIn) -> Any:
    scope = scoped_cluster(request)
    wanted = claim_filter(payload, scope)
    # Nothing of this request keeps a database connection while it waits.
    await sync_to_async(_release_connection)()
    claim = await claim_waiting(
        wanted=wanted,
        wait=payload.wait,
        lease_seconds=round(payload.lease) if payload.lease is not None else None,
        worker=payload.worker,
        run=_on_request_thread,
    )
    if claim is None:
        return Status(204, None)
    return claim.to_wire()


def claim_filter(payload: ClaimIn, scope: str | None) -> ClaimFilter:
    """What the claim asks for, within what its key may see (a scoped key: its cluster)."""
    if scope is not None and payload.cluster not in (None, scope):
        raise Forbidden(
            f"this API key is limited to cluster {scope!r}", details={"cluster": payload.cluster}
        )
    providers = tuple(sorted(set(payload.providers)))
    return ClaimFilter(
        cluster_id=payload.cluster or scope,
        agents=tuple(payload.agents),
        roles=tuple(payload.roles),
        labels=tuple(ledger.labels_parse(payload.labels).items()),
        providers=providers,
    )


async def _on_request_thread(fn: Callable[[], Any]) -> Any:
    """Run ``fn`` as Django runs this view's sync work, then let its connection go."""

    def run() -> Any:
        try:
            return fn()
        finally:
            _release_connection()

    return await sync_to_async(run)()


def _release_connection() -> None:
    """Close this thread's connection unless a transaction holds it (a test wraps in one)."""
    if not connection.in_atomic_block:
        close_old_connections()


@router.post(
    "/tasks/{task_id}/heartbeat", response={200: TaskOut, **ERRORS}, summary="Extend a lease"
)
def tasks_heartbeat(request: HttpRequest, task_id: str, payload: LeaseIn) -> dict[str, Any]:
    task = services.task_heartbeat(
        task_id=task_id, lease_id=payload.lease_id, scope=scoped_cluster(request)
    )
    return task.to_wire()


@router.post(
    "/tasks/{task_id}/output",
    response={200: list[MessageOut], **ERRORS},
    summary="Stream lines of the agent's output",
    exclude_unset=True,
)
def tasks_output(request: HttpRequest, task_id: str, payload: OutputIn) -> list[dict[str, Any]]:
    records = services.task_output(
        task_id=task_id,
        lease_id=payload.lease_id,
        lines=payload.lines,
        offset=payload.offset,
        scope=scoped_cluster(request),
    )
    return [r.to_wire() for r in records]


@router.post(
    "/tasks/{task_id}/complete",
    response={200: CompletionOut, **ERRORS},
    summary="Complete a task: its hook runs and its messages are published",
    exclude_unset=True,
)
def tasks_complete(request: HttpRequest, task_id: str, payload: CompleteIn) -> dict[str, Any]:
    usage = payload.usage.model_dump(exclude_none=True) if payload.usage is not None else None
    completion = services.task_complete(
        task_id=task_id,
        lease_id=payload.lease_id,
        result=payload.result,
        output=payload.output,
        usage=usage,
        scope=scoped_cluster(request),
    )
    return {
        "task": completion.task.to_wire(),
        "messages": [m.to_wire() for m in completion.messages],
    }


@router.post(
    "/tasks/{task_id}/fail", response={200: TaskOut, **ERRORS}, summary="Fail (or retry) a task"
)
def tasks_fail(request: HttpRequest, task_id: str, payload: FailIn) -> dict[str, Any]:
    task = services.task_fail(
        task_id=task_id,
        lease_id=payload.lease_id,
        error=payload.error,
        retryable=payload.retryable,
        scope=scoped_cluster(request),
    )
    return task.to_wire()


@router.get(
    "/tasks/{task_id}", response={200: TaskOut, **ERRORS}, summary="One task, with its result"
)
def tasks_get(request: HttpRequest, task_id: str) -> dict[str, Any]:
    task = selectors.task_get(task_id=task_id)
    require_cluster(request, task.cluster_id)
    return task.to_wire()


@router.get(
    "/clusters/{cluster_id}/tasks",
    response={200: TaskPageOut, **ERRORS},
    summary="A cluster's tasks, newest first",
)
def clusters_tasks(
    request: HttpRequest, cluster_id: str, filters: Query[TaskQueryIn]
) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    ledger.cluster_get(cluster_id=cluster_id)
    tasks = selectors.task_list(
        cluster_id=cluster_id,
        agent_id=filters.agent,
        state=filters.state,
        before=filters.before,
        limit=filters.limit,
    )
    next_before = tasks[-1].id if len(tasks) == filters.limit else None
    return {"items": [t.to_wire() for t in tasks], "next_before": next_before}


class ConditionOut(Schema):
    state: str = Field(
        description="the cluster's state, or `stalled`: running, but every agent has sat idle "
        "with nothing queued, claimed or waiting for longer than CLUSTER_STALL_SECONDS"
    )
    stalled: bool
    reason: str | None = Field(description="why a failed or stalled cluster does not move")
    idle_since: int | None = Field(description="ms: a stalled cluster's newest message")


@router.get(
    "/clusters/{cluster_id}/condition",
    response={200: ConditionOut, **ERRORS},
    summary="Whether a cluster can still move: its state, stalled, and why",
)
def clusters_condition(request: HttpRequest, cluster_id: str) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    return selectors.cluster_conditions([cluster])[cluster.id].to_wire()


@router.post(
    "/clusters/{cluster_id}/start",
    response={200: ClusterDetailOut, **ERRORS},
    summary="Start a cluster with an issue",
)
def clusters_start(request: HttpRequest, cluster_id: str, payload: StartIn) -> ClusterRecord:
    require_cluster(request, cluster_id)
    return services.cluster_start(cluster_id=cluster_id, issue=payload.issue.model_dump())


@router.post(
    "/clusters/{cluster_id}/stop",
    response={200: ClusterDetailOut, **ERRORS},
    summary="Stop a cluster",
)
def clusters_stop(request: HttpRequest, cluster_id: str) -> ClusterRecord:
    require_cluster(request, cluster_id)
    return services.cluster_stop(cluster_id=cluster_id)


@router.post(
    "/clusters/{cluster_id}/guidance",
    response={201: MessageOut, **ERRORS},
    summary="Send guidance to a running cluster's agents",
    description=(
        "Publishes `USER_GUIDANCE_AGENT` (to `agent`) or `USER_GUIDANCE_CLUSTER` (to all), "
        "sender `user`. Each addressed agent's next prompt carries it once, in zeroshot's "
        "`## Guidance (Queued)` section (SPEC §7.8). 409 when the cluster is not running, "
        "422 for an agent the cluster does not have."
    ),
    exclude_unset=True,
)
def clusters_guidance(request: HttpRequest, cluster_id: str, payload: GuidanceIn) -> Status[Any]:
    require_cluster(request, cluster_id)
    record = services.guidance_send(cluster_id=cluster_id, text=payload.text, agent=payload.agent)
    return Status(201, record.to_wire())


class RunnerOut(Schema):
    name: str = Field(description="as its claims name it (`worker`; the runner's default host:pid)")
    first_seen_at: int = Field(description="ms")
    last_seen_at: int = Field(description="ms: its latest claim, completion or failure")
    labels: dict[str, str] = Field(description="the labels its claims ask for (its pool)")
    providers: list[str] = Field(description="the providers its claims ask for; empty: any")
    holding: int = Field(description="tasks it holds a lease on now")
    claimed: int
    completed: int
    failed: int = Field(description="fail calls it made (a retry counts)")


@router.get(
    "/runners",
    response={200: list[RunnerOut], **ERRORS},
    summary="The runners that claimed, most recently seen first",
)
def runners_list(request: HttpRequest) -> list[dict[str, Any]]:
    if scoped_cluster(request) is not None:
        raise Forbidden("a key limited to one cluster cannot list the runners")
    return [r.to_wire() for r in selectors.runners_seen()]
