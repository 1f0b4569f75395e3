"""The task cycle's prebuilt statements (runs/statements.py) say what the ORM queries they
replace said; a claim and a completion make a pinned number of queries."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet
from django.test.utils import CaptureQueriesContext

from context.models import ContextBuild
from ledger.interfaces import MessageDraft, cluster_create, message_publish
from runs import statements
from runs.models import BufferedTrigger, Task, TaskState
from runs.services import task_claim, task_complete
from runs.services.tasks import _Wanted, claim_narrow, claimable
from runs.states import TaskEvent, task_move
from tests.plans import query_plan

pytestmark = pytest.mark.django_db(transaction=True)


def fields(task: Task | None) -> dict[str, Any] | None:
    if task is None:
        return None
    return {f.attname: getattr(task, f.attname) for f in Task._meta.concrete_fields}


def _columns_set(captured: CaptureQueriesContext) -> set[str]:
    """The columns the one UPDATE among ``captured``'s statements sets."""
    [update] = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("UPDATE")]
    set_part = update.split(" SET ", 1)[1].split(" WHERE ", 1)[0]
    return {column.split(" = ")[0].strip('"`') for column in set_part.split(", ")}


def tasks_in_every_state() -> None:
    """Two clusters, three agents each, tasks in every state, ties on ``created_at``."""
    for cluster_id in ("c1", "c2"):
        cluster_create(cluster_id=cluster_id, config={"agents": []}, state="running")
    states = itertools.cycle(
        [
            TaskState.QUEUED,
            TaskState.QUEUED,
            TaskState.CLAIMED,
            TaskState.EXPIRED,
            TaskState.COMPLETED,
            TaskState.QUEUED,
            TaskState.CANCELLED,
            TaskState.DROPPED,
        ]
    )
    n = 0
    for cluster_id in ("c1", "c2"):
        for agent in ("a", "b", "c"):
            for _ in range(5):
                n += 1
                state = next(states)
                Task.objects.create(
                    id=f"task_{n:03d}",
                    cluster_id=cluster_id,
                    agent_id=agent,
                    role="validator" if agent == "c" else "implementation",
                    provider="codex" if agent == "b" else "",
                    iteration=n,
                    state=state,
                    trigger_message_id=f"m{n}",
                    trigger_topic="GO",
                    trigger_sequence=n,
                    created_at=1000 + n // 3,  # ties, broken by id
                    available_at=1000 + (n % 4) * 10,
                    lease_expires_at=900 + n if state == TaskState.CLAIMED else None,
                    result={"n": n, "x": [None, True]} if n % 2 else None,
                    usage={"inputTokens": n} if n % 3 else None,
                    completion_messages=[f"msg_{n}"] if n % 5 else [],
                    settled_sequence=n if state == TaskState.COMPLETED and n % 2 else None,
                )
            BufferedTrigger.objects.create(
                cluster_id=cluster_id,
                agent_id=agent,
                message_id=f"buf-{cluster_id}-{agent}",
                message_sequence=n,
                topic="GO",
                buffered_at=n,
                dropped=agent == "b",
            )


WANTED = [
    _Wanted(cluster_id=None, agents=(), roles=(), labels=(), providers=()),
    _Wanted(cluster_id="c2", agents=(), roles=(), labels=(), providers=()),
    _Wanted(cluster_id=None, agents=("b", "c"), roles=(), labels=(), providers=()),
    _Wanted(cluster_id="c1", agents=(), roles=("validator",), labels=(), providers=()),
    _Wanted(cluster_id=None, agents=(), roles=(), labels=(), providers=("codex", "claude")),
    _Wanted(cluster_id="nope", agents=(), roles=(), labels=(), providers=()),
]


def claimable_as_specified(now: int) -> QuerySet[Task]:
    """SPEC §7.3's claimable tasks in one condition: a queued task with nothing of its agent
    claimed, expired or queued before it, or an expired one."""
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


@pytest.mark.parametrize("wanted", WANTED)
@pytest.mark.parametrize("now", [1005, 1015, 1100])
def test_the_claimable_task_is_the_orms(wanted: _Wanted, now: int) -> None:
    tasks_in_every_state()
    for _ in range(4):  # claim, as a claim does, until nothing is left for these filters
        with transaction.atomic():
            specified = fields(
                claim_narrow(claimable_as_specified(now), wanted)
                .order_by("created_at", "id")
                .first()
            )
            theirs = (
                claim_narrow(claimable(now=now), wanted)
                .order_by("created_at", "id")
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
            assert fields(theirs) == specified
            ours = statements.claimable_first(
                now=now,
                cluster_id=wanted.cluster_id,
                agents=wanted.agents,
                roles=wanted.roles,
                providers=wanted.providers,
            )
        assert fields(ours) == fields(theirs)
        if ours is None:
            break
        ours.state = TaskState.CLAIMED
        statements.task_save(ours)


def _task_at(task_id: str, agent: str, state: TaskState, created_at: int) -> None:
    Task.objects.create(
        id=task_id,
        cluster_id="c1",
        agent_id=agent,
        role="implementation",
        iteration=created_at,
        state=state,
        trigger_message_id=task_id,
        trigger_topic="GO",
        trigger_sequence=created_at,
        created_at=created_at,
        available_at=0,
    )


def _first_claimable(wanted: _Wanted) -> tuple[str | None, str | None]:
    """The task a claim would take: by the prebuilt statement, and by the ORM's query."""
    with transaction.atomic():
        ours = statements.claimable_first(
            now=10_000, cluster_id=wanted.cluster_id, agents=(), roles=(), providers=()
        )
        theirs = (
            claim_narrow(claimable(now=10_000), wanted)
            .order_by("created_at", "id")
            .select_for_update(skip_locked=True, of=("self",))
            .first()
        )
    return (ours.id if ours else None), (theirs.id if theirs else None)


@pytest.mark.parametrize(
    ("expired_at", "head_at", "first"),
    [(1000, 2000, "e"), (2000, 1000, "q"), (1500, 1500, "e"), (1500, 1500, "q")],
)
def test_an_expired_task_and_a_queue_head_are_taken_oldest_first(
    expired_at: int, head_at: int, first: str
) -> None:
    # given an agent with an expired task (and a queued one behind it, not a head), another
    # agent with a queue head behind a completed task, and ids that order a tie
    cluster_create(cluster_id="c1", config={"agents": []}, state="running", labels={"k": "v"})
    expired_id, head_id = ("t1", "t2") if first == "e" else ("t2", "t1")
    _task_at(expired_id, "a", TaskState.EXPIRED, expired_at)
    _task_at("t3", "a", TaskState.QUEUED, 1)
    _task_at("t0", "b", TaskState.COMPLETED, 0)
    _task_at(head_id, "b", TaskState.QUEUED, head_at)
    _task_at("t4", "b", TaskState.QUEUED, head_at)
    wanted = _Wanted(cluster_id="c1", agents=(), roles=(), labels=(), providers=())
    labelled = replace(wanted, labels=(("k", "v"),))
    # when a claim looks, the older of the two candidates (the smaller id on a tie) comes first
    taken = (
        expired_id if expired_at < head_at or (expired_at == head_at and first == "e") else head_id
    )
    assert _first_claimable(wanted) == (taken, taken)
    assert _first_claimable(labelled)[1] == taken
    # then, once it is claimed, the other one
    Task.objects.filter(pk=taken).update(state=TaskState.CLAIMED)
    other = head_id if taken == expired_id else expired_id
    assert _first_claimable(wanted) == (other, other)
    # and with both claimed, nothing: each agent's queued tasks wait behind its claimed one
    Task.objects.filter(pk=other).update(state=TaskState.CLAIMED)
    assert _first_claimable(wanted) == (None, None)


def test_the_claimable_reads_seek_their_states_not_the_history() -> None:
    # given a cluster with a long history of completed tasks and a few open ones
    tasks_in_every_state()
    Task.objects.bulk_create(
        Task(
            id=f"old_{n:05d}",
            cluster_id="c1",
            agent_id="a",
            role="implementation",
            iteration=100 + n,
            state=TaskState.COMPLETED,
            trigger_message_id=f"old{n}",
            trigger_topic="GO",
            trigger_sequence=100 + n,
            created_at=n,
            available_at=n,
        )
        for n in range(3000)
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {Task._meta.db_table}")
    for cluster_id in ("c1", None):
        narrow = [] if cluster_id is None else [cluster_id]
        params = statements.claimable_params(now=1100, narrow=narrow)
        sql = statements._claimable_sql(connection.vendor, cluster_id is not None, 0, 0, 0)
        # when the claim's statement is explained (PostgreSQL on the table's statistics)
        plan = query_plan(sql, params, sequential_scans=True)
        # then the expired tasks and the queued ones are read on an index that starts with
        # their state, not from the cluster's or the agent's history (PostgreSQL's planner
        # reads the one condition so; on SQLite the two lookups and the tasks ahead of a head
        # are seeks of state-led indexes)
        assert "task_claimable" in plan, plan
        if connection.vendor == "postgresql":
            assert "Seq Scan on runs_task" not in plan, plan
        else:
            for history in ("task_cluster_recent", "task_agent_iteration", "SCAN "):
                assert history not in plan, plan


def test_a_task_read_and_saved_is_the_orms() -> None:
    tasks_in_every_state()
    for task in Task.objects.all():
        assert fields(statements.task_by_id(task.id)) == fields(task)
        assert statements.task_cluster(task.id) == task.cluster_id
    assert statements.task_by_id("task_nope") is None
    assert statements.task_cluster("task_nope") is None
    # every column written back, JSON and nulls included
    task = statements.task_by_id("task_001")
    assert task is not None
    task.result, task.usage, task.completion_messages = {"a": [1, "é", None]}, None, ["m"]
    task.lease_expires_at, task.error, task.state = None, "x" * 10, TaskState.FAILED
    statements.task_save(task)
    assert fields(Task.objects.get(pk="task_001")) == fields(task)
    task.completion_messages = ["other"]
    task.error = "not written"
    statements.task_save(task, ["completion_messages"])
    saved = Task.objects.get(pk="task_001")
    assert (saved.completion_messages, saved.error) == (["other"], "x" * 10)


def test_a_task_read_with_its_builds_guidance_is_the_orms() -> None:
    # given tasks in every state, two of them with a build, one build carrying guidance
    tasks_in_every_state()
    carried = {}
    for task_id, through in (("task_001", 7), ("task_002", None)):
        build = ContextBuild.objects.create(
            cluster_id="c1",
            agent_id="a",
            iteration=1,
            started_at=1,
            max_tokens=1,
            final_tokens=1,
            metrics={},
            pack_texts=[],
            guidance_through=through,
        )
        Task.objects.filter(pk=task_id).update(build=build)
        carried[task_id] = through is not None
    # when each is read with whether its build carried guidance
    for task in Task.objects.all():
        found = statements.task_with_guidance(task.id)
        # then the task is the ORM's, and the answer its build's (none without a build)
        assert found is not None
        assert fields(found[0]) == fields(task)
        assert found[1] is carried.get(task.id, False)
    assert statements.task_with_guidance("task_nope") is None


def test_a_task_inserted_is_the_orms() -> None:
    cluster_create(cluster_id="c1", config={"agents": []}, state="running")
    given: dict[str, Any] = {
        "cluster_id": "c1",
        "agent_id": "a",
        "role": "implementation",
        "provider": "codex",
        "iteration": 3,
        "state": TaskState.QUEUED.value,
        "trigger_message_id": "m1",
        "trigger_topic": "GO",
        "trigger_sequence": 12,
        "trigger_sender": "système",
        "created_at": 1000,
        "available_at": 1001,
    }
    Task.objects.create(id="task_orm", **given)
    statements.task_insert(id="task_stmt", **{**given, "trigger_message_id": "m2"})
    orm, stmt = fields(Task.objects.get(pk="task_orm")), fields(Task.objects.get(pk="task_stmt"))
    assert orm is not None
    assert stmt is not None
    assert {**orm, "id": "task_stmt", "trigger_message_id": "m2"} == stmt
    # the once-per-trigger constraint holds as it does for the ORM
    with pytest.raises(IntegrityError), transaction.atomic():
        statements.task_insert(id="task_again", **given)


def test_a_move_writes_the_columns_it_changed_and_no_other() -> None:
    tasks_in_every_state()
    task = statements.task_by_id("task_001")  # queued
    assert task is not None
    assert task.state == TaskState.QUEUED
    # another writer sets a column the move does not (the trigger stage's settle)
    Task.objects.filter(pk="task_001").update(settled_sequence=77, role="changed elsewhere")
    with CaptureQueriesContext(connection) as moving:
        task_move(
            task,
            TaskEvent.CLAIM,
            now=5000,
            lease_id="L1",
            lease_seconds=60,
            lease_expires_at=65_000,
            worker="w",
        )
    written = _columns_set(moving)
    # task_001 had no attempts, no claim, no output: the claim changes these and its fields
    assert written == {
        "state",
        "attempts",
        "claimed_at",
        "lease_id",
        "lease_seconds",
        "lease_expires_at",
        "worker",
    }
    saved = Task.objects.get(pk="task_001")
    assert (saved.settled_sequence, saved.role) == (77, "changed elsewhere")
    assert (saved.state, saved.attempts, saved.claimed_at, saved.lease_id, saved.worker) == (
        TaskState.CLAIMED,
        1,
        5000,
        "L1",
        "w",
    )
    # a move's own columns set to the value they hold are left out, its fields are not
    task = statements.task_by_id("task_001")
    assert task is not None
    with CaptureQueriesContext(connection) as completing:
        task_move(task, TaskEvent.COMPLETE, now=6000, result=None, usage=None)
    written = _columns_set(completing)
    assert written == {
        "state",
        "lease_id",
        "lease_expires_at",
        "finished_at",
        "result",
        "usage",
    }
    saved = Task.objects.get(pk="task_001")
    assert fields(saved) == fields(task)
    # a field that is no column of a task is refused before anything moves
    task = statements.task_by_id("task_002")
    assert task is not None
    with pytest.raises(ValueError, match="not columns of a task"):
        task_move(task, TaskEvent.CLAIM, now=7000, lease="L2")
    assert task.state == TaskState.QUEUED


def test_the_trigger_stages_reads_are_the_orms() -> None:
    tasks_in_every_state()
    unsettled = Q(settled_sequence__isnull=True) & ~Q(
        state__in=(TaskState.CANCELLED, TaskState.DROPPED)
    )
    for cluster_id in ("c1", "c2", "nope"):
        ids = Task.objects.filter(unsettled, cluster_id=cluster_id).values_list("agent_id", "id")
        assert sorted(statements.unsettled_tasks(cluster_id)) == sorted(ids)
        waiting = (
            BufferedTrigger.objects.filter(cluster_id=cluster_id, dropped=False)
            .order_by("agent_id", "message_sequence")
            .values_list("agent_id", "message_id", "topic", "message_sequence", "id")
        )
        assert statements.buffered_triggers(cluster_id) == list(waiting)
        for agent in ("a", "b", "z"):
            assert statements.buffered_triggers(cluster_id, agent_id=agent) == list(
                waiting.filter(agent_id=agent)
            )
        for agent in ("a", "b", "z"):
            tasks = Task.objects.filter(cluster_id=cluster_id, agent_id=agent)
            # (the newest iteration: the pipeline numbers an agent's tasks 1, 2, … so it is
            # their count; these tasks are numbered across agents to tell the two apart)
            newest = tasks.aggregate(newest=Max("iteration"))["newest"] or 0
            assert statements.agent_iteration(cluster_id=cluster_id, agent_id=agent) == newest
            for message_id in ("m1", "m8", "m20", "nope"):
                assert statements.agent_tasks_and_trigger(
                    cluster_id=cluster_id, agent_id=agent, message_id=message_id
                ) == (newest, tasks.filter(trigger_message_id=message_id).exists())


def test_the_trigger_stages_reads_of_tasks_seek_their_indexes() -> None:
    # given the trigger stage's statements over tasks, the planner kept off whole-table scans
    tasks_in_every_state()
    reads = {
        "task_unsettled": [
            (statements._unsettled_sql(connection.vendor), ["c1"]),
        ],
        "task_agent_iteration": [
            (statements._iteration_sql(connection.vendor), ["c1", "a"]),
            (statements._queued_before_sql(connection.vendor), ["c1", "a", "c1", "a", "m1"]),
        ],
    }
    buffer = (statements._buffered_sql(connection.vendor, True), ["c1", False, "a"])
    reads["trigger_buffer_order"] = [buffer]
    reads["task_lease_expiry"] = [(statements._leases_sql(connection.vendor), ["claimed", 51])]
    for index, statements_of in reads.items():
        for sql, params in statements_of:
            # when each is explained, then it reads its index, not the table's every row
            plan = query_plan(sql, params)
            assert index in plan, plan
    claimed = Task.objects.filter(state=TaskState.CLAIMED, lease_expires_at__isnull=False)
    assert [fields(t) for t in statements.leases_first(limit=3)] == [
        fields(t) for t in claimed.order_by("lease_expires_at")[:3]
    ]


def test_the_agents_activity_reads_are_the_orms() -> None:
    tasks_in_every_state()
    open_states = (TaskState.QUEUED, TaskState.CLAIMED, TaskState.EXPIRED)
    for cluster_id in ("c1", "c2", "nope"):
        opened = Task.objects.filter(cluster_id=cluster_id, state__in=open_states)
        assert [fields(t) for t in statements.open_tasks(cluster_id)] == [
            fields(t) for t in opened.order_by("created_at", "id")
        ]
        finished = (
            Task.objects.filter(cluster_id=cluster_id)
            .exclude(state__in=open_states)
            .values_list("agent_id", "state")
            .annotate(n=Count("*"), newest=Max("created_at"))
            .order_by()
        )
        assert sorted(statements.finished_counts(cluster_id)) == sorted(finished)
        kept = (
            BufferedTrigger.objects.filter(cluster_id=cluster_id)
            .values_list("agent_id", "dropped")
            .annotate(n=Count("*"))
            .order_by()
        )
        assert sorted(statements.buffered_counts(cluster_id)) == sorted(kept)
        assert all(isinstance(d, bool) for _, d, _ in statements.buffered_counts(cluster_id))


def test_buffer_rows_are_deleted_and_dropped_in_their_cluster_only() -> None:
    # given buffer rows in two clusters
    tasks_in_every_state()
    for cluster_id in ("c1", "c2"):
        for n in range(4):
            BufferedTrigger.objects.create(
                cluster_id=cluster_id,
                agent_id="a",
                message_id=f"more-{n}",
                message_sequence=100 + n,
                topic="GO",
                buffered_at=n,
            )
    c1 = list(BufferedTrigger.objects.filter(cluster_id="c1").order_by("id"))
    c2_before = list(BufferedTrigger.objects.filter(cluster_id="c2").values().order_by("id"))
    # when some of c1's rows are deleted and others dropped, an id of c2 given to both
    judged, dropped = [c1[0].id, c1[2].id], [c1[1].id]
    stranger = c2_before[0]["id"]
    assert statements.buffer_rows_delete(cluster_id="c1", ids=[*judged, stranger]) == 2
    assert statements.buffer_rows_drop(cluster_id="c1", ids=[*dropped, stranger]) == 1
    # then c1 holds the rest, the dropped one marked, and c2 is untouched
    left = dict(BufferedTrigger.objects.filter(cluster_id="c1").values_list("id", "dropped"))
    expected = {row.id: row.dropped or row.id in dropped for row in c1 if row.id not in judged}
    assert left == expected
    assert list(BufferedTrigger.objects.filter(cluster_id="c2").values().order_by("id")) == (
        c2_before
    )


def test_a_claim_and_a_completion_make_a_pinned_number_of_queries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the test's claims come within one look at the leases, however slow the machine
    monkeypatch.setattr("runs.services.tasks.LEASE_LOOK_MS", 60_000)
    # given a running cluster with two agents and a task for each
    agents = [
        {"id": f"w{n}", "role": "implementation", "prompt": "Work.", "triggers": [{"topic": "GO"}]}
        for n in range(2)
    ]
    cluster_create(cluster_id="c1", config={"agents": agents}, state="running")
    for _ in range(2):
        message_publish(cluster_id="c1", draft=MessageDraft(topic="GO", sender="system"))
    task_claim(cluster_id="c1", worker="w")  # the runner is known, the leases looked at
    # when a claim and its completion are made
    with CaptureQueriesContext(connection) as claiming:
        claim = task_claim(cluster_id="c1", worker="w")
    assert claim is not None
    with CaptureQueriesContext(connection) as completing:
        task_complete(task_id=claim.task.id, lease_id=claim.task.lease_id, result={}, output="{}")
    # then each reads its task and its cluster once, as counted here (the post-commit
    # pipeline's turns included); a change of either count is a change of these paths
    reads = [q["sql"] for q in claiming.captured_queries]
    assert len(claiming.captured_queries) == CLAIM_QUERIES[connection.vendor], reads
    done = [q["sql"] for q in completing.captured_queries]
    assert len(completing.captured_queries) == COMPLETE_QUERIES[connection.vendor], done


# The statements of a claim and of a completion, their pipeline turns included, BEGIN/COMMIT
# counted (SQLite's BEGIN IMMEDIATE is one; PostgreSQL's transactions open implicitly).
CLAIM_QUERIES = {"sqlite": 18, "postgresql": 18}
COMPLETE_QUERIES = {"sqlite": 20, "postgresql": 20}
