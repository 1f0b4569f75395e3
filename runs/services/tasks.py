"""Tasks through their life: claimed under a lease, heartbeats, output, completion, failure.

SPEC §7.3, §7.4. A claim takes the oldest claimable task in one short write transaction (on
PostgreSQL ``FOR UPDATE SKIP LOCKED``, on SQLite under its write lock), then records the
task's context build, its ``TASK_STARTED`` and the link between them in the ledger's write
transaction. Every later call carries the lease id; a lease that is no longer current is a
``Conflict`` (409), which is how a late worker learns it lost the task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform
from django.db.models.lookups import Exact

from context.agents import AgentSpec
from context.services import (
    BuildOutcome,
    agent_config_get,
    agent_spec_get,
    build_guidance_delivered,
    build_usage_record,
    context_build,
)
from ledger import interfaces as ledger
from ledger.interfaces import (
    JSON,
    ClusterRecord,
    ClusterWriter,
    Conflict,
    Forbidden,
    InvalidInput,
    MessageDraft,
    MessageRecord,
    ServiceError,
)
from runs import lifecycle, observe, statements
from runs.hooks import (
    HookFailure,
    HookOutcome,
    completion_drafts,
    failure_drafts,
    release_pooled_connection,
    start_draft,
)
from runs.models import Runner, Task, TaskState
from runs.records import TaskRecord
from runs.selectors import task_record
from runs.services.usage import usage_day_add
from runs.signals import tasks_changed
from runs.states import TaskEvent, task_move, task_moved
from runs.watchdog import conductor_watchdogs_fire

logger = logging.getLogger(__name__)

DEFAULT_LEASE_SECONDS = 120
LEASE_BOUNDS = (5, 3600)
DEFAULT_MAX_RETRIES = 3
OUTPUT_MAX_LINES = 1000
# Leases looked at per claim: a claim ends the leases that ran out before it looks for work.
EXPIRED_PER_CLAIM = 50
# How long after a look at the leases a claim may go without another (ms). A lease granted or
# renewed after the look, by this server or another, runs out at least LEASE_BOUNDS[0]
# seconds after it was granted, so later than the next look (docs/decisions/0295).
LEASE_LOOK_MS = 1000


@dataclass(frozen=True, slots=True)
class Claim:
    """A claimed task with everything its worker needs: the prompt and the agent's config."""

    task: TaskRecord
    prompt: str
    metrics: dict[str, JSON]
    agent: dict[str, JSON]

    def to_wire(self) -> dict[str, JSON]:
        task = self.task.to_wire(with_lease=True)
        task["lease_seconds"] = self.lease_seconds
        return {"task": task, "prompt": self.prompt, "metrics": self.metrics, "agent": self.agent}

    @property
    def lease_seconds(self) -> int:
        if self.task.lease_expires_at is None or self.task.claimed_at is None:
            return 0
        return (self.task.lease_expires_at - self.task.claimed_at) // 1000


@dataclass(frozen=True, slots=True)
class Completion:
    """What completing a task published, in order."""

    task: TaskRecord
    messages: tuple[MessageRecord, ...]


# --- claiming ------------------------------------------------------------------------------------


def task_claim(
    *,
    cluster_id: str | None = None,
    agents: Sequence[str] = (),
    roles: Sequence[str] = (),
    labels: Sequence[tuple[str, str]] = (),
    providers: Sequence[str] = (),
    lease_seconds: int | None = None,
    worker: str = "",
) -> Claim | None:
    """Claim the oldest claimable task that passes the filters; None when there is none.

    Leases that ran out are ended first (``tasks_expire``, when one may have: ``lease_look``).
    A task whose build cannot be made (an agent config the engine refuses, a number its tables
    cannot hold) fails at once, with ``AGENT_ERROR``, and the next one is tried: one bad config
    never wedges the queue.
    ``worker`` is recorded as seen whether or not a task is claimed: with the claim it takes
    (``_take``), or else on its own (``runner_seen``).
    """
    started_ns = time.time_ns()  # observe: the claim's span
    lease = _lease_seconds(lease_seconds)
    _leases_end_when_due(now=ledger.now_ms())
    conductor_watchdogs_fire(now=ledger.now_ms())
    wanted = _Wanted(
        cluster_id=cluster_id,
        agents=tuple(agents),
        roles=tuple(roles),
        labels=tuple(labels),
        providers=tuple(providers),
    )
    for attempt in range(20):
        taken = _take(wanted, lease=lease, worker=worker)
        if taken is None:
            if worker and attempt == 0:
                runner_seen(name=worker, labels=dict(labels), providers=tuple(providers))
            return None
        task, started_draft = taken
        cluster = ledger.cluster_get(cluster_id=task.cluster_id)
        try:
            agent = agent_config_get(cluster=cluster, agent_id=task.agent_id)
            spec = agent_spec_get(cluster=cluster, agent_id=task.agent_id)
            on_start = start_draft(task=task, agent=spec, cluster=cluster)
            if isinstance(on_start, HookFailure):
                # As in zeroshot, a failing onStart hook fails the attempt (runTaskAttempt).
                _fail_quietly(task, error=f"the onStart hook failed: {on_start.error}")
                continue
            outcome = _build(task, cluster, started_draft, before=on_start)
        except (OperationalError, InterfaceError):
            raise  # the database, not the task: the lease runs out and another claim retries
        except ServiceError as error:
            _finish_failed(task, error=f"the task's context cannot be built: {error.message}")
            continue
        except Exception as error:
            logger.exception("the build of task %s failed", task.id)
            _finish_failed(
                task, error=f"the task's context cannot be built: {type(error).__name__}"
            )
            continue
        if outcome is None:
            continue  # the lease moved on while the build was made
        started = replace(task, build_id=outcome.build_id)
        claim = Claim(
            task=started, prompt=outcome.context, metrics=outcome.metrics, agent=agent_wire(agent)
        )
        observe.task_claimed.send(None, claim=claim, started_ns=started_ns, ended_ns=time.time_ns())
        return claim
    return None


def _lease_seconds(asked: int | None) -> int:
    low, high = LEASE_BOUNDS
    if asked is None:
        return DEFAULT_LEASE_SECONDS
    if not low <= asked <= high:
        raise InvalidInput(
            f"lease must be between {low} and {high} seconds", details={"field": "lease"}
        )
    return asked


def claimable(*, now: int) -> QuerySet[Task]:
    """Tasks a worker may take now: the head of each agent's queue, or a lease that ended.

    An agent runs one task at a time, in the order its triggers came (SPEC §7.3): a queued task
    waits while its agent has a claimed task or an older queued one. Where rows are not locked
    (SQLite) the two kinds are read apart, each on an index of its state, as
    ``statements.claimable_first`` reads them: one condition with an ``OR`` between them read
    the whole history of the tasks' clusters there (docs/decisions/0280).
    """
    if connection.features.has_select_for_update:
        ahead = Task.objects.filter(
            cluster_id=OuterRef("cluster_id"), agent_id=OuterRef("agent_id")
        ).filter(
            Q(state__in=(TaskState.CLAIMED, TaskState.EXPIRED))
            | Q(state=TaskState.QUEUED, created_at__lt=OuterRef("created_at"))
            | Q(state=TaskState.QUEUED, created_at=OuterRef("created_at"), id__lt=OuterRef("id"))
        )
        return Task.objects.filter(
            (Q(state=TaskState.QUEUED, available_at__lte=now) & ~Exists(ahead))
            | Q(state=TaskState.EXPIRED)
        )
    ahead = Task.objects.filter(
        cluster_id=OuterRef("cluster_id"),
        agent_id=OuterRef("agent_id"),
        state__in=(TaskState.QUEUED, TaskState.CLAIMED, TaskState.EXPIRED),
    ).filter(
        Q(state__in=(TaskState.CLAIMED, TaskState.EXPIRED))
        | Q(created_at__lt=OuterRef("created_at"))
        | Q(created_at=OuterRef("created_at"), id__lt=OuterRef("id"))
    )
    expired = Task.objects.filter(state=TaskState.EXPIRED).values("id")
    heads = (
        Task.objects.filter(state=TaskState.QUEUED, available_at__lte=now)
        .filter(~Exists(ahead))
        .values("id")
    )
    return Task.objects.filter(id__in=expired.union(heads, all=True))


class _LeaseLook:
    """When this process must next look for lapsed leases: the earliest lease its last look
    saw, and at most ``LEASE_LOOK_MS`` after that look (a lease it did not see was granted or
    renewed after the look began, for 5 s at least). Until then no lease can have run out, and
    a claim does not read them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._due = 0

    def take(self, now: int) -> bool:
        """Whether a look is due at ``now``; if so, the others wait for its answer."""
        with self._lock:
            if now < self._due:
                return False
            self._due = now + LEASE_LOOK_MS
            return True

    def seen(self, looked_at: int, next_lapse: int | None) -> None:
        """A look begun at ``looked_at`` found ``next_lapse``: the earliest lease left."""
        due = looked_at + LEASE_LOOK_MS
        if next_lapse is not None:
            due = min(due, next_lapse)
        with self._lock:
            self._due = min(self._due, due)

    def now(self) -> None:
        """The next claim looks, whatever the last look saw: for a lease ended behind this
        process's back, by a write of its row."""
        with self._lock:
            self._due = 0


lease_look = _LeaseLook()


def _leases_end_when_due(*, now: int) -> None:
    if lease_look.take(now):
        tasks_expire(now=now)


def tasks_expire(*, now: int) -> int:
    """End the leases that ran out before ``now``; how many were ended.

    A lease that expires counts as an attempt (SPEC §7.3): with retries left the task is
    ``expired`` and claimable again, past ``maxRetries`` it fails for good with ``AGENT_ERROR``,
    like a ``fail`` call: a task whose agent kills its runner every time ends. The read also
    finds the next lease to run out, which tells when a claim must look again (``lease_look``).
    """
    ended = 0
    first = statements.leases_first(limit=EXPIRED_PER_CLAIM + 1)
    lapsed = [t for t in first if t.lease_expires_at is not None and t.lease_expires_at < now]
    lapsed = lapsed[:EXPIRED_PER_CLAIM]
    if len(lapsed) < EXPIRED_PER_CLAIM:
        following = first[len(lapsed) :]
        lease_look.seen(now, following[0].lease_expires_at if following else None)
    else:
        lease_look.seen(now, now)  # more may have lapsed: the next claim looks again
    for peek in lapsed:
        cluster = ledger.cluster_get(cluster_id=peek.cluster_id)
        max_retries = _max_retries(cluster, peek.agent_id)
        error = f"its lease expired (attempt {peek.attempts} of {max_retries + 1})"
        # The last attempt's failure policy (its onError hook may run a script) is made before
        # the write transaction; the lease is checked again inside it.
        prepared = None
        if peek.attempts > max_retries:
            prepared = _final_failure(task_record(peek), cluster, error=error)
        with ledger.cluster_transaction(peek.cluster_id) as writer:
            task = statements.task_by_id(peek.id, lock=True)
            if task is None or task.state != TaskState.CLAIMED:
                continue  # another claim ended it first
            if task.lease_id != peek.lease_id:
                continue  # another claim took it again
            if task.lease_expires_at is None or task.lease_expires_at >= now:
                continue  # a heartbeat came first
            if prepared is None:
                task_move(task, TaskEvent.EXPIRE, now=now, error=error)
            else:
                before, after = prepared
                draft = task_move(
                    task, TaskEvent.FAIL, now=now, error=error, report=_exhausted("lease", task)
                )
                assert draft is not None
                writer.append([*before, draft, *after], now=ledger.now_ms())
                transaction.on_commit(tasks_changed.notify)
            ended += 1
    return ended


@dataclass(frozen=True, slots=True)
class _Wanted:
    cluster_id: str | None
    agents: tuple[str, ...]
    roles: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    providers: tuple[str, ...]


def claim_narrow(tasks: QuerySet[Task], wanted: _Wanted) -> QuerySet[Task]:
    """``tasks`` that pass a claim's filters (SPEC §7.4). Labels: the task's cluster carries
    each (a key lookup on the cluster row the claim joins by primary key); providers: the
    task's agent names one of them or none."""
    if wanted.cluster_id is not None:
        tasks = tasks.filter(cluster_id=wanted.cluster_id)
    if wanted.agents:
        tasks = tasks.filter(agent_id__in=list(wanted.agents))
    if wanted.roles:
        tasks = tasks.filter(role__in=list(wanted.roles))
    if wanted.providers:
        tasks = tasks.filter(Q(provider="") | Q(provider__in=list(wanted.providers)))
    for key, value in wanted.labels:
        tasks = tasks.filter(Exact(KeyTextTransform(key, "cluster__labels"), value))
    return tasks


def _take(wanted: _Wanted, *, lease: int, worker: str) -> tuple[TaskRecord, MessageDraft] | None:
    """Lock the oldest claimable task and give it a new lease, in one short transaction; the
    task and its ``TASK_STARTED``, which the build records. The runner is recorded as seen,
    serving what it asked for, and its claim counted, in the same transaction."""
    with transaction.atomic(durable=True):
        now = ledger.now_ms()
        if wanted.labels:
            tasks = claim_narrow(claimable(now=now), wanted)
            task = (
                tasks.order_by("created_at", "id")
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
        else:  # the same query, prebuilt
            task = statements.claimable_first(
                now=now,
                cluster_id=wanted.cluster_id,
                agents=wanted.agents,
                roles=wanted.roles,
                providers=wanted.providers,
            )
        if task is None:
            return None
        started = task_move(
            task,
            TaskEvent.CLAIM,
            now=now,
            lease_id=uuid.uuid4().hex,
            lease_seconds=lease,
            lease_expires_at=now + lease * 1000,
            worker=worker[:128],
        )
        if worker:
            labels, providers = _serves(dict(wanted.labels), wanted.providers)
            statements.runner_claimed(
                name=worker[:128], now=now, labels=labels, providers=providers
            )
    assert started is not None
    return task_record(task), started


def _build(
    task: TaskRecord,
    cluster: ClusterRecord,
    started_draft: MessageDraft,
    *,
    before: MessageDraft | None = None,
) -> BuildOutcome | None:
    """Record the task's context build with its ``TASK_STARTED`` (after the ``onStart`` hook's
    message, ``before``), or None if the lease moved."""

    def started(writer: ClusterWriter, build_id: int) -> None:
        linked = statements.task_build_link(
            task_id=task.id, lease_id=task.lease_id, build_id=build_id
        )
        if not linked:
            raise _LeaseMoved
        writer.append([*([before] if before else []), started_draft], now=ledger.now_ms())

    try:
        return context_build(
            cluster_id=cluster.id,
            agent_id=task.agent_id,
            iteration=task.iteration,
            triggering_message_id=task.trigger_message_id,
            record_with=started,
            cluster=cluster,
            # Its guidance is delivered when the task completes (SPEC §7.8): a claim whose
            # answer is lost, a lease that runs out or a failed attempt leaves it queued.
            guidance_on_completion=True,
        )
    except _LeaseMoved:
        return None


class _LeaseMoved(Exception):
    """The task's lease ended before what it was to record was written (a claim's build, a
    completion): nothing of it is kept."""


def agent_wire(agent: Mapping[str, JSON]) -> dict[str, JSON]:
    """The agent's config as its worker needs it: what to run, not how the server drives it."""
    server_side = {"triggers", "hooks", "contextStrategy", "condition"}
    wire = {key: value for key, value in agent.items() if key not in server_side}
    wire.setdefault("outputFormat", "json")
    # zeroshot's default (src/agent/agent-config.ts): the runner asks a provider that can enforce
    # the schema natively to do so (SPEC §7.5).
    wire.setdefault("strictSchema", True)
    return wire


# --- the calls a worker makes while it holds a lease -----------------------------------------


def _held(*, task_id: str, lease_id: str, scope: str | None, task: Task | None = None) -> Task:
    """The task, locked, if ``lease_id`` is its current lease; else ``Conflict``. ``task`` is
    the row when the caller has locked it already."""
    if task is None:
        task = statements.task_by_id(task_id, lock=True)
    if task is None:
        raise ledger.NotFound(f"task {task_id!r} does not exist", details={"task_id": task_id})
    if scope is not None and task.cluster_id != scope:
        raise Forbidden(
            f"this API key is limited to cluster {scope!r}", details={"task_id": task_id}
        )
    if task.state != TaskState.CLAIMED or task.lease_id != lease_id:
        raise Conflict(
            f"the lease on task {task_id} is no longer current (the task is {task.state})",
            details={"task_id": task_id, "state": task.state},
        )
    return task


def task_heartbeat(*, task_id: str, lease_id: str, scope: str | None = None) -> TaskRecord:
    """Extend the lease by its length from now."""
    with transaction.atomic(durable=True):
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        task.lease_expires_at = ledger.now_ms() + task.lease_seconds * 1000
        statements.task_save(task, ["lease_expires_at"])
    return task_record(task)


def task_output(
    *,
    task_id: str,
    lease_id: str,
    lines: Sequence[str],
    offset: int | None = None,
    scope: str | None = None,
) -> list[MessageRecord]:
    """Store lines of the agent's raw output as one ``AGENT_OUTPUT`` message.

    ``offset`` counts the lines this lease sent before: lines already stored (a batch sent again
    after its answer was lost) are not stored twice.
    """
    if len(lines) > OUTPUT_MAX_LINES:
        raise InvalidInput(
            f"send at most {OUTPUT_MAX_LINES} lines at a time", details={"field": "lines"}
        )
    cluster_id = _cluster_of(task_id)
    with ledger.cluster_transaction(cluster_id) as writer:
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        fresh = list(lines)
        if offset is not None and offset < task.output_lines:
            fresh = fresh[task.output_lines - offset :]
        if not fresh:
            return []
        task.output_lines += len(fresh)
        task.save(update_fields=["output_lines"])
        draft = lifecycle.output_draft(task_record(task), fresh)
        return writer.append([draft], now=ledger.now_ms())


def _cluster_of(task_id: str) -> str:
    cluster_id = statements.task_cluster(task_id)
    if cluster_id is None:
        raise ledger.NotFound(f"task {task_id!r} does not exist", details={"task_id": task_id})
    return cluster_id


def task_complete(
    *,
    task_id: str,
    lease_id: str,
    result: JSON,
    output: str = "",
    usage: Mapping[str, JSON] | None = None,
    scope: str | None = None,
) -> Completion:
    """Apply the agent's hook and publish, in one batch with the task's end: ``TOKEN_USAGE``
    (with usage), ``TASK_COMPLETED`` and the hook's message (SPEC §7.4, §7.5).

    Completing again with the same body returns the same messages; another body is refused.
    A result the agent's config refuses (not a JSON object, a strict schema) fails the task as
    retryable instead, and says so with ``InvalidInput``.
    """
    started_ns = time.time_ns()  # observe: the completion's span
    body = {"lease_id": lease_id, "result": result, "output": output, "usage": usage}
    body_hash = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    # The hook's scripts run before the write transaction (they may take seconds): a read of
    # the row, no lock; the lease is checked again inside the transaction.
    read = _held_or_completed(
        task_id=task_id,
        lease_id=lease_id,
        scope=scope,
        body=body_hash,
    )
    if isinstance(read, Completion):
        return read
    held, carried_guidance = read
    record = task_record(held)
    cluster_id = held.cluster_id
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    agent = agent_spec_get(cluster=cluster, agent_id=record.agent_id)
    if agent.hooks.on_complete is not None:
        # Its scripts may wait for a sandbox: the pooled connection goes back meanwhile. Without
        # a hook, reading the result is the only work before the write: the connection stays.
        release_pooled_connection()
    hook_ns = time.time_ns()  # observe: the hook's span
    outcome = completion_drafts(
        task=record, agent=agent, cluster=cluster, result=result, output=output
    )
    hook_span = (hook_ns, time.time_ns())  # observe
    if outcome.rejected is not None:
        failed = task_fail(
            task_id=task_id, lease_id=lease_id, error=outcome.rejected, retryable=outcome.retryable
        )
        raise InvalidInput(
            f"the result was refused: {outcome.rejected}",
            details={"task_id": task_id, "state": failed.state},
            code="result_refused",
        )
    try:
        task, messages = _completion_write(
            held,
            record,
            lease_id=lease_id,
            body=body_hash,
            outcome=outcome,
            usage=usage,
            carried_guidance=carried_guidance,
        )
    except _LeaseMoved:
        # Nothing was written. What moved it: the same body completing it while the hook ran
        # (the same answer), or anything else (a conflict).
        again = _held_or_completed(
            task_id=task_id,
            lease_id=lease_id,
            scope=scope,
            body=body_hash,
        )
        if isinstance(again, Completion):
            return again
        raise Conflict(  # held again under this lease: it cannot be, lease ids are not reused
            f"the lease on task {task_id} moved during its completion",
            details={"task_id": task_id, "state": again[0].state},
        ) from None
    done = Completion(task=task_record(task), messages=tuple(messages))
    observe.task_completed.send(
        None, completion=done, started_ns=started_ns, ended_ns=time.time_ns(), hook_ns=hook_span
    )
    return done


def _completion_write(
    task: Task,
    record: TaskRecord,
    *,
    lease_id: str,
    body: str,
    outcome: HookOutcome,
    usage: Mapping[str, JSON] | None,
    carried_guidance: bool,
) -> tuple[Task, list[MessageRecord]]:
    """Write a completion of ``task`` (as read before its hook ran, no lock): its messages and
    its row in the cluster's transaction; ``_LeaseMoved`` (everything rolled back) when the row
    is no longer claimed under ``lease_id``. The guidance its build carried
    (``carried_guidance``, read with the row) is marked delivered; a build that carried none
    is not written to.

    The row is not read again under a lock: its UPDATE is made only while the lease holds,
    which checks the same thing in the same transaction. Nothing a claimed task's record shows
    changes under one lease but its lease's end (a heartbeat), which the completion ends. The
    row is written before the runner's, in the order a claim locks them."""
    # The move's UPDATE waits for the messages' ids: one UPDATE writes both.
    completed, moved = task_moved(
        task,
        TaskEvent.COMPLETE,
        now=ledger.now_ms(),
        result=outcome.result,
        usage=dict(usage) if usage else None,
        completion_hash=body,
    )
    assert completed is not None
    drafts: list[MessageDraft] = []
    if usage:
        drafts.append(lifecycle.usage_draft(record, dict(usage)))
    drafts.append(completed)
    drafts.extend(outcome.drafts)
    now = ledger.now_ms()
    # Its messages are known before the transaction: the cluster's row is locked and moved
    # past them in one statement.
    with ledger.cluster_transaction(task.cluster_id, appending=(drafts, now)) as writer:
        messages = writer.append(drafts, now=now)
        task.completion_messages = [m.id for m in messages]
        if not statements.task_save_held(task, [*moved, "completion_messages"], lease_id=lease_id):
            raise _LeaseMoved
        _runner_count(task.worker, "completed")
        if usage and task.build_id is not None:
            build_usage_record(build_id=task.build_id, usage=usage)
        if task.build_id is not None and carried_guidance:
            build_guidance_delivered(build_id=task.build_id)
        if usage:
            usage_day_add(
                agent_id=task.agent_id,
                usage=usage,
                finished_at=task.finished_at or ledger.now_ms(),
            )
        transaction.on_commit(tasks_changed.notify)
    return task, messages


def _held_or_completed(
    *, task_id: str, lease_id: str, scope: str | None, body: str
) -> tuple[Task, bool] | Completion:
    """The task's row (read now, no lock) if it is held under ``lease_id``, and whether its
    build carried guidance; or, when that body already completed it, what that completion
    published; another body is a ``Conflict``. Concurrent completions with one body all get
    the same answer (SPEC §7.4): only one of them writes (``_completion_write`` checks the
    lease in its UPDATE), the others read it here."""
    found = statements.task_with_guidance(task_id)
    task, carried = found if found is not None else (None, False)
    if task is None or not task.completion_hash:
        return _held(task_id=task_id, lease_id=lease_id, scope=scope, task=task), carried
    if scope is not None and task.cluster_id != scope:
        raise Forbidden(f"this API key is limited to cluster {scope!r}")
    if task.completion_hash != body:
        raise Conflict(
            f"task {task_id} was already completed with another result",
            details={"task_id": task_id},
        )
    messages = tuple(
        ledger.message_get(cluster_id=task.cluster_id, message_id=message_id)
        for message_id in task.completion_messages
    )
    return Completion(task=task_record(task), messages=messages)


def task_fail(
    *,
    task_id: str,
    lease_id: str,
    error: str,
    retryable: bool = True,
    scope: str | None = None,
) -> TaskRecord:
    """Retry the task after a backoff while it has retries left, else fail it for good with
    zeroshot's failure policy (``_final_failure``)."""
    cluster_id = _cluster_of(task_id)
    cluster = ledger.cluster_get(cluster_id=cluster_id)
    # A final failure's onError hook may run a script: it runs before the write transaction.
    peek = Task.objects.filter(pk=task_id, lease_id=lease_id, state=TaskState.CLAIMED).first()
    prepared = None
    if peek is not None and (not retryable or peek.attempts > _max_retries(cluster, peek.agent_id)):
        prepared = _final_failure(task_record(peek), cluster, error=error)
    with ledger.cluster_transaction(cluster_id) as writer:
        task = _held(task_id=task_id, lease_id=lease_id, scope=scope)
        max_retries = _max_retries(cluster, task.agent_id)
        now = ledger.now_ms()
        if retryable and task.attempts <= max_retries:
            delay = _backoff_ms(task.attempts)
            draft = task_move(
                task,
                TaskEvent.RETRY,
                now=now,
                error=error,
                report={"maxRetries": max_retries, "delayMs": delay},
                available_at=now + delay,
            )
            assert draft is not None
            drafts = [draft]
        else:
            before, after = prepared or _final_failure(task_record(task), cluster, error=error)
            draft = task_move(
                task, TaskEvent.FAIL, now=now, error=error, report=_exhausted("task", task)
            )
            assert draft is not None
            drafts = [*before, draft, *after]
        _runner_count(task.worker, "failed")
        writer.append(drafts, now=ledger.now_ms())
        transaction.on_commit(tasks_changed.notify)
    failed = task_record(task)
    observe.task_failed.send(None, task=failed, ended_ns=time.time_ns())
    return failed


def _fail_quietly(task: TaskRecord, *, error: str) -> None:
    """Fail a just-claimed task as retryable; nothing when its lease moved on meanwhile."""
    with contextlib.suppress(Conflict):
        task_fail(task_id=task.id, lease_id=task.lease_id, error=error, retryable=True)


def _final_failure(
    task: TaskRecord, cluster: ClusterRecord, *, error: str
) -> tuple[list[MessageDraft], list[MessageDraft]]:
    """zeroshot's failure policy for a task that fails for good (SPEC §7.3): the drafts before
    its ``AGENT_ERROR`` (a validator's rejection) and after it (its ``onError`` hook's message,
    and ``CLUSTER_FAILED`` when the agent is critical)."""
    return failure_drafts(
        task=task, agent=_agent_spec(cluster, task.agent_id), cluster=cluster, error=error
    )


def _exhausted(phase: str, task: Task) -> dict[str, JSON]:
    """What a final failure's ``AGENT_ERROR`` adds (zeroshot's handleFinalFailure)."""
    return {"phase": phase, "retryBudgetExhausted": True, "attempts": task.attempts}


def _agent_spec(cluster: ClusterRecord, agent_id: str) -> AgentSpec | None:
    try:
        return agent_spec_get(cluster=cluster, agent_id=agent_id)
    except ServiceError:
        return None


# --- the runners the claims name ---------------------------------------------------------------

# A runner seen this recently with the same labels and providers is not written again: a claim
# that long-polls costs one read, not a write, while its runner idles.
RUNNER_SEEN_EVERY_MS = 5000


def runner_seen(*, name: str, labels: Mapping[str, str], providers: Sequence[str]) -> None:
    """Record that the runner ``name`` claimed now, serving ``labels`` and ``providers``: one
    read, and one upsert when it was not seen lately or serves something else now."""
    name = name[:128]
    now = ledger.now_ms()
    serves = _serves(labels, providers)
    row = statements.runner_seen_row(name)
    if row is not None and now - row[0] < RUNNER_SEEN_EVERY_MS and (row[1], row[2]) == serves:
        return
    Runner.objects.bulk_create(
        [
            Runner(
                name=name,
                first_seen_at=now,
                last_seen_at=now,
                labels=serves[0],
                providers=serves[1],
            )
        ],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["last_seen_at", "labels", "providers"],
    )


def _serves(
    labels: Mapping[str, str], providers: Sequence[str]
) -> tuple[dict[str, str], list[str]]:
    """What a runner serves as its row keeps it: the labels and the providers, sorted."""
    return dict(sorted(labels.items())), sorted(providers)


def _runner_count(worker: str, field: str) -> None:
    """Count a completion or failure for the task's runner, in the caller's transaction."""
    if worker:
        statements.runner_count(name=worker, field=field, now=ledger.now_ms())


def _finish_failed(task: TaskRecord, *, error: str) -> None:
    """Fail a just-claimed task for good (its build cannot be made), say why, and apply the
    failure policy: an agent that cannot be built can no longer act."""
    cluster = ledger.cluster_get(cluster_id=task.cluster_id)
    before, after = _final_failure(task, cluster, error=error)
    with ledger.cluster_transaction(task.cluster_id) as writer:
        row = Task.objects.select_for_update().get(pk=task.id)
        if row.state != TaskState.CLAIMED or row.lease_id != task.lease_id:
            return
        draft = task_move(
            row, TaskEvent.FAIL, now=ledger.now_ms(), error=error, report=_exhausted("build", row)
        )
        assert draft is not None
        writer.append([*before, draft, *after], now=ledger.now_ms())
        transaction.on_commit(tasks_changed.notify)


def _max_retries(cluster: ClusterRecord, agent_id: str) -> int:
    try:
        return agent_spec_get(cluster=cluster, agent_id=agent_id).limits.max_retries
    except ServiceError:
        return DEFAULT_MAX_RETRIES


def _backoff_ms(attempts: int) -> int:
    """Wait before the next attempt: doubling from the base, at most a minute."""
    base = float(settings.RUNS_RETRY_BASE_SECONDS)
    return int(min(60.0, base * 2 ** max(0, attempts - 1)) * 1000)
