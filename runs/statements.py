"""Prebuilt SQL for the task cycle's hot paths: the reads and writes every claim, completion and
trigger-stage batch makes on ``Task``, ``Runner`` and ``BufferedTrigger``.

Compiling these through the ORM took several times as long as the database took to run them
(bench/results/cpu-task-cycle.md), as ``ledger.statements`` found for the ledger's: so the SQL
of each shape is written once per database vendor, from the models' own table and column names,
and run through a plain cursor with parameters. Rows come back through the fields' own
converters (``Task.from_db``), so a task read here is the task the ORM would give; writes go
through the fields' ``get_db_prep_save``. The statements say what the ORM queries they replace
said, in the same order (``tests/runs/test_statements.py`` checks them against those).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.models import Field, Model

from context.models import ContextBuild
from ledger.interfaces import statement_count, statement_rows
from runs.models import BufferedTrigger, Runner, Task, TaskState

_TASK_FIELDS: tuple[Field[Any, Any], ...] = tuple(Task._meta.concrete_fields)
_TASK_NAMES = tuple(f.attname for f in _TASK_FIELDS)
_TASK_NAME_LIST = list(_TASK_NAMES)  # as ``Model.from_db`` takes them (it does not change them)
# The states as plain strings: database drivers adapt exact types.
_QUEUED, _CLAIMED, _EXPIRED = (
    TaskState.QUEUED.value,
    TaskState.CLAIMED.value,
    TaskState.EXPIRED.value,
)
_CANCELLED, _DROPPED = TaskState.CANCELLED.value, TaskState.DROPPED.value


def _q(name: str) -> str:
    return str(connection.ops.quote_name(name))


def _table(model: type[Model]) -> str:
    return _q(model._meta.db_table)


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    field = model._meta.get_field(name)
    assert isinstance(field, Field)
    return field


def _col(model: type[Model], name: str) -> str:
    return _q(str(_field(model, name).column))


@cache
def _task_columns(vendor: str, alias: str = "") -> str:
    prefix = f"{alias}." if alias else ""
    return ", ".join(prefix + _q(f.column) for f in _TASK_FIELDS)


@cache
def _converters(vendor: str) -> tuple[tuple[Any, list[Any]], ...]:
    """Each column's converters, as the ORM's compiler applies them to a row."""
    table = Task._meta.db_table
    out = []
    for field in _TASK_FIELDS:
        column = field.get_col(table)
        own: list[Any] = cast(Any, field).get_db_converters(connection)
        out.append((column, connection.ops.get_db_converters(column) + own))
    return tuple(out)


@cache
def _converting(vendor: str) -> tuple[tuple[int, Any, tuple[Any, ...]], ...]:
    """(position, column, converters) of the columns that have converters."""
    return tuple(
        (n, column, tuple(converters))
        for n, (column, converters) in enumerate(_converters(vendor))
        if converters
    )


def _task(row: Sequence[Any]) -> Task:
    db = connections[DEFAULT_DB_ALIAS]
    values = list(row)
    if len(values) != len(_TASK_NAMES):
        raise ValueError(f"a task row has {len(_TASK_NAMES)} columns, not {len(values)}")
    for n, column, converters in _converting(db.vendor):
        value = values[n]
        for converter in converters:
            value = converter(value, column, db)
        values[n] = value
    return Task.from_db(db.alias, _TASK_NAME_LIST, values)


# On the driver's cursor unless Django watches its statements (docs/decisions/0195).
_rows = statement_rows
_count = statement_count


def _lock(skip_locked: bool = False) -> str:
    if not connection.features.has_select_for_update:
        return ""
    return " FOR UPDATE SKIP LOCKED" if skip_locked else " FOR UPDATE"


# --- one task --------------------------------------------------------------------------------


@cache
def _task_by_id_sql(vendor: str, lock: bool) -> str:
    return f"SELECT {_task_columns(vendor)} FROM {_table(Task)} WHERE {_col(Task, 'id')} = %s" + (
        _lock() if lock else ""
    )


def task_by_id(task_id: str, *, lock: bool = False) -> Task | None:
    """The task, or None; ``lock``: ``select_for_update`` (PostgreSQL), inside a transaction."""
    rows = _rows(_task_by_id_sql(connection.vendor, lock), [task_id], prepare=True)
    return _task(rows[0]) if rows else None


@cache
def _task_with_guidance_sql(vendor: str) -> str:
    build = ContextBuild._meta
    return (
        f"SELECT {_task_columns(vendor, 't')}, (SELECT b.{_col(ContextBuild, 'guidance_through')} "
        f"FROM {_table(ContextBuild)} b WHERE b.{_q(str(build.pk.column))} = "
        f"t.{_col(Task, 'build')}) IS NOT NULL "
        f"FROM {_table(Task)} t WHERE t.{_col(Task, 'id')} = %s"
    )


def task_with_guidance(task_id: str) -> tuple[Task, bool] | None:
    """The task, or None, and whether its build carried guidance (the build's
    ``guidance_through``, written when the build is recorded and never after): a primary-key
    seek of the build in the task's read."""
    rows = _rows(_task_with_guidance_sql(connection.vendor), [task_id], prepare=True)
    if not rows:
        return None
    *task, carried = rows[0]
    return _task(task), bool(carried)


@cache
def _task_fields(names: tuple[str, ...]) -> tuple[Field[Any, Any], ...]:
    return tuple(_field(Task, name) for name in names)


@cache
def _task_update_sql(vendor: str, names: tuple[str, ...]) -> str:
    sets = ", ".join(f"{_col(Task, n)} = %s" for n in names)
    return f"UPDATE {_table(Task)} SET {sets} WHERE {_col(Task, 'id')} = %s"


def task_save(task: Task, fields: Sequence[str] | None = None) -> None:
    """``task.save()`` (every column) or ``task.save(update_fields=fields)``: one UPDATE by
    primary key; a task not in the table yet is saved by the ORM, as ``save`` would."""
    names = tuple(fields) if fields is not None else _TASK_NAMES[1:]
    params = [
        field.get_db_prep_save(getattr(task, field.attname), connection)
        for field in _task_fields(names)
    ]
    if not _count(_task_update_sql(connection.vendor, names), [*params, task.pk], prepare=True):
        task.save(update_fields=fields)


@cache
def _task_update_held_sql(vendor: str, names: tuple[str, ...]) -> str:
    return (
        f"{_task_update_sql(vendor, names)} AND {_col(Task, 'state')} = %s "
        f"AND {_col(Task, 'lease_id')} = %s"
    )


def task_save_held(task: Task, fields: Sequence[str], *, lease_id: str) -> bool:
    """``task_save(task, fields)`` while the task is claimed under ``lease_id``: whether it
    was. On PostgreSQL the UPDATE waits for a concurrent writer of the row and checks its
    condition again on what that one committed."""
    names = tuple(fields)
    params = [
        field.get_db_prep_save(getattr(task, field.attname), connection)
        for field in _task_fields(names)
    ]
    sql = _task_update_held_sql(connection.vendor, names)
    return bool(_count(sql, [*params, task.pk, _CLAIMED, lease_id], prepare=True))


@cache
def _task_insert(
    vendor: str, names: tuple[str, ...]
) -> tuple[str, tuple[Field[Any, Any], ...], tuple[Any, ...]]:
    """The INSERT of a task given ``names`` (attribute names), every other column its default:
    its SQL, the given columns' fields and the others' values, prepared once."""
    fields = tuple(_field(Task, name) for name in names)
    others = [f for f in _TASK_FIELDS if f.attname not in names]
    defaults = tuple(f.get_db_prep_save(f.get_default(), connection) for f in others)
    columns = ", ".join(_q(str(f.column)) for f in (*fields, *others))
    marks = ", ".join(["%s"] * (len(fields) + len(others)))
    return f"INSERT INTO {_table(Task)} ({columns}) VALUES ({marks})", fields, defaults


def task_insert(**values: Any) -> None:
    """``Task.objects.create(**values)`` (attribute names), as one prebuilt INSERT; every
    column not given gets the model's default."""
    sql, fields, defaults = _task_insert(connection.vendor, tuple(values))
    params = [
        f.get_db_prep_save(v, connection) for f, v in zip(fields, values.values(), strict=True)
    ]
    _count(sql, [*params, *defaults], prepare=True)


@cache
def _task_cluster_sql(vendor: str) -> str:
    return f"SELECT {_col(Task, 'cluster')} FROM {_table(Task)} WHERE {_col(Task, 'id')} = %s"


def task_cluster(task_id: str) -> str | None:
    rows = _rows(_task_cluster_sql(connection.vendor), [task_id], prepare=True)
    return str(rows[0][0]) if rows else None


@cache
def _build_link_sql(vendor: str) -> str:
    return (
        f"UPDATE {_table(Task)} SET {_col(Task, 'build')} = %s WHERE {_col(Task, 'id')} = %s "
        f"AND {_col(Task, 'state')} = %s AND {_col(Task, 'lease_id')} = %s"
    )


def task_build_link(*, task_id: str, lease_id: str, build_id: int) -> int:
    """Link a claimed task to its build while ``lease_id`` is its lease; the rows moved."""
    return _count(
        _build_link_sql(connection.vendor), [build_id, task_id, _CLAIMED, lease_id], prepare=True
    )


# --- claiming --------------------------------------------------------------------------------


@cache
def _leases_sql(vendor: str) -> str:
    return (
        f"SELECT {_task_columns(vendor)} FROM {_table(Task)} "
        f"WHERE {_col(Task, 'state')} = %s AND {_col(Task, 'lease_expires_at')} IS NOT NULL "
        f"ORDER BY {_col(Task, 'lease_expires_at')} ASC LIMIT %s"
    )


def leases_first(*, limit: int) -> list[Task]:
    """Claimed tasks, the lease that runs out first first (``task_lease_expiry``): the lapsed
    ones, then the next to lapse."""
    return [
        _task(r) for r in _rows(_leases_sql(connection.vendor), [_CLAIMED, limit], prepare=True)
    ]


def _narrow(alias: str, cluster: bool, agents: int, roles: int, providers: int) -> str:
    """A claim's filters on the task ``alias``, each ``AND …``."""
    where = []
    if cluster:
        where.append(f"{alias}.{_col(Task, 'cluster')} = %s")
    if agents:
        where.append(f"{alias}.{_col(Task, 'agent_id')} IN ({', '.join(['%s'] * agents)})")
    if roles:
        where.append(f"{alias}.{_col(Task, 'role')} IN ({', '.join(['%s'] * roles)})")
    if providers:
        provider = f"{alias}.{_col(Task, 'provider')}"
        where.append(f"({provider} = %s OR {provider} IN ({', '.join(['%s'] * providers)}))")
    return "".join(f" AND {term}" for term in where)


@cache
def _claimable_sql(vendor: str, cluster: bool, agents: int, roles: int, providers: int) -> str:
    """``claim_narrow(claimable(now), wanted).order_by("created_at", "id")`` for a claim
    without labels, its first row, locked (``SKIP LOCKED``) where the database can.

    Where rows are not locked (SQLite), the candidates are read as the two kinds of claimable
    task, the expired tasks and the queue heads, each on an index that starts with its state
    (``task_claimable``, ``task_lease_expiry``, ``task_cluster_state``, ``task_agent_queue``;
    ``tests/runs/test_statements.py`` reads the plans): one condition with an ``OR`` between
    them kept SQLite's planner on the cluster's whole history. Where rows are locked
    (PostgreSQL), the statement is that one condition: its planner reads it by state, and
    the two lookups, locked, made concurrent claims wait on each other (docs/decisions/0280).
    """
    t, u = "t", "u"

    def col(alias: str, name: str) -> str:
        return f"{alias}.{_col(Task, name)}"

    order = f"ORDER BY {col(t, 'created_at')} ASC, {col(t, 'id')} ASC LIMIT 1"
    filters = _narrow(t, cluster, agents, roles, providers)
    if connection.features.has_select_for_update:
        ahead = (
            f"SELECT 1 FROM {_table(Task)} {u} WHERE {col(u, 'agent_id')} = {col(t, 'agent_id')} "
            f"AND {col(u, 'cluster')} = {col(t, 'cluster')} AND ({col(u, 'state')} IN (%s, %s) "
            f"OR ({col(u, 'created_at')} < {col(t, 'created_at')} AND {col(u, 'state')} = %s) "
            f"OR ({col(u, 'created_at')} = {col(t, 'created_at')} "
            f"AND {col(u, 'id')} < {col(t, 'id')} AND {col(u, 'state')} = %s))"
        )
        return (
            f"SELECT {_task_columns(vendor, t)} FROM {_table(Task)} {t} "
            f"WHERE (({col(t, 'available_at')} <= %s AND {col(t, 'state')} = %s "
            f"AND NOT EXISTS ({ahead})) OR {col(t, 'state')} = %s){filters} {order}"
            + _lock(skip_locked=connection.features.has_select_for_update_skip_locked)
        )
    e, q = "e", "q"
    # Written with the states first, so that it is a seek of ``task_agent_queue``, not a read
    # of the agent's whole history.
    ahead = (
        f"SELECT 1 FROM {_table(Task)} {u} WHERE {col(u, 'cluster')} = {col(q, 'cluster')} "
        f"AND {col(u, 'agent_id')} = {col(q, 'agent_id')} AND {col(u, 'state')} IN (%s, %s, %s) "
        f"AND ({col(u, 'state')} IN (%s, %s) OR {col(u, 'created_at')} < {col(q, 'created_at')} "
        f"OR ({col(u, 'created_at')} = {col(q, 'created_at')} AND {col(u, 'id')} < {col(q, 'id')}))"
    )
    expired = (
        f"SELECT {col(e, 'id')} FROM {_table(Task)} {e} WHERE {col(e, 'state')} = %s"
        + _narrow(e, cluster, agents, roles, providers)
    )
    heads = (
        f"SELECT {col(q, 'id')} FROM {_table(Task)} {q} WHERE {col(q, 'state')} = %s "
        f"AND {col(q, 'available_at')} <= %s{_narrow(q, cluster, agents, roles, providers)} "
        f"AND NOT EXISTS ({ahead})"
    )
    return (
        f"SELECT {_task_columns(vendor, t)} FROM {_table(Task)} {t} "
        f"WHERE {col(t, 'id')} IN ({expired} UNION ALL {heads}) {order}"
    )


def claimable_first(
    *,
    now: int,
    cluster_id: str | None,
    agents: Sequence[str],
    roles: Sequence[str],
    providers: Sequence[str],
) -> Task | None:
    """The oldest claimable task that passes a claim's filters (no labels), locked."""
    sql = _claimable_sql(
        connection.vendor, cluster_id is not None, len(agents), len(roles), len(providers)
    )
    narrow: list[Any] = [] if cluster_id is None else [cluster_id]
    narrow += [*agents, *roles]
    if providers:
        narrow += ["", *providers]
    # Never prepared: a plan made for no values in particular does not know that the states
    # it asks for are rare; with 200,000 finished tasks such a plan cost 20 ms more a claim
    # (docs/decisions/0309).
    rows = _rows(sql, claimable_params(now=now, narrow=narrow), prepare=False)
    return _task(rows[0]) if rows else None


def claimable_params(*, now: int, narrow: Sequence[Any]) -> list[Any]:
    """``_claimable_sql``'s parameters, in its order, ``narrow`` those of the claim's filters."""
    if connection.features.has_select_for_update:
        # the queue head, the tasks ahead of it, an expired task; the filters
        return [now, _QUEUED, _CLAIMED, _EXPIRED, _QUEUED, _QUEUED, _EXPIRED, *narrow]
    # the expired tasks, the queue heads and the tasks ahead of one
    return [
        _EXPIRED,
        *narrow,
        _QUEUED,
        now,
        *narrow,
        _QUEUED,
        _CLAIMED,
        _EXPIRED,
        _CLAIMED,
        _EXPIRED,
    ]


# --- runners ---------------------------------------------------------------------------------


@cache
def _runner_seen_sql(vendor: str) -> str:
    return (
        f"SELECT {_col(Runner, 'last_seen_at')}, {_col(Runner, 'labels')}, "
        f"{_col(Runner, 'providers')} FROM {_table(Runner)} WHERE {_col(Runner, 'name')} = %s"
    )


def runner_seen_row(name: str) -> tuple[int, Any, Any] | None:
    """The runner's last sighting, labels and providers (as the ORM reads its JSON), or None."""
    rows = _rows(_runner_seen_sql(connection.vendor), [name], prepare=True)
    if not rows:
        return None
    seen, labels, providers = rows[0]
    fields = cast(Any, (_field(Runner, "labels"), _field(Runner, "providers")))
    return (
        int(seen),
        fields[0].from_db_value(labels, None, connection),
        fields[1].from_db_value(providers, None, connection),
    )


@cache
def _runner_claimed_sql(vendor: str) -> str:
    r, name, seen = _table(Runner), _col(Runner, "name"), _col(Runner, "last_seen_at")
    labels, providers, claimed = (
        _col(Runner, "labels"),
        _col(Runner, "providers"),
        _col(Runner, "claimed"),
    )
    columns = [name, _col(Runner, "first_seen_at"), seen, labels, providers, claimed]
    columns += [_col(Runner, "completed"), _col(Runner, "failed")]
    return (
        f"INSERT INTO {r} ({', '.join(columns)}) VALUES (%s, %s, %s, %s, %s, 1, 0, 0) "
        f"ON CONFLICT ({name}) DO UPDATE SET {seen} = EXCLUDED.{seen}, "
        f"{labels} = EXCLUDED.{labels}, {providers} = EXCLUDED.{providers}, "
        f"{claimed} = {r}.{claimed} + 1"
    )


def runner_claimed(*, name: str, now: int, labels: Any, providers: Any) -> None:
    """The runner claimed a task ``now``, serving ``labels`` and ``providers``: its row made or
    brought up to date, one more claim counted, in one statement."""
    fields = cast(Any, (_field(Runner, "labels"), _field(Runner, "providers")))
    params = [
        name,
        now,
        now,
        fields[0].get_db_prep_save(labels, connection),
        fields[1].get_db_prep_save(providers, connection),
    ]
    _count(_runner_claimed_sql(connection.vendor), params, prepare=True)


@cache
def _runner_count_sql(vendor: str, field: str) -> str:
    column = _col(Runner, field)
    return (
        f"UPDATE {_table(Runner)} SET {column} = {column} + 1, "
        f"{_col(Runner, 'last_seen_at')} = %s WHERE {_col(Runner, 'name')} = %s"
    )


def runner_count(*, name: str, field: str, now: int) -> None:
    """One more ``field`` (claimed, completed, failed) for the runner, seen ``now``."""
    _count(_runner_count_sql(connection.vendor, field), [now, name], prepare=True)


# --- the trigger stage -----------------------------------------------------------------------


# A task that holds its agent busy: not settled (its end not yet offered) and neither cancelled
# nor dropped. Written out, not bound, so that the planners of both databases match the
# partial index ``task_unsettled`` (same terms) and read only such tasks.
def _unsettled_where() -> str:
    return (
        f"{_col(Task, 'cluster')} = %s AND {_col(Task, 'settled_sequence')} IS NULL "
        f"AND NOT ({_col(Task, 'state')} IN ('{_CANCELLED}', '{_DROPPED}'))"
    )


@cache
def _iteration_sql(vendor: str) -> str:
    return (
        f"SELECT MAX({_col(Task, 'iteration')}) FROM {_table(Task)} "
        f"WHERE {_col(Task, 'cluster')} = %s AND {_col(Task, 'agent_id')} = %s"
    )


def agent_iteration(*, cluster_id: str, agent_id: str) -> int:
    """How many tasks the agent has had: its newest task's iteration (``task_queue`` numbers
    them 1, 2, … and never deletes one), 0 before its first."""
    rows = _rows(_iteration_sql(connection.vendor), [cluster_id, agent_id], prepare=True)
    return int(rows[0][0] or 0)


@cache
def _unsettled_sql(vendor: str) -> str:
    return (
        f"SELECT {_col(Task, 'agent_id')}, {_col(Task, 'id')} FROM {_table(Task)} "
        f"WHERE {_unsettled_where()}"
    )


def unsettled_tasks(cluster_id: str) -> list[tuple[str, str]]:
    """(agent, task id) of the cluster's tasks that hold their agent busy."""
    return [
        (str(a), str(i))
        for a, i in _rows(_unsettled_sql(connection.vendor), [cluster_id], prepare=True)
    ]


@cache
def _buffered_sql(vendor: str, agent: bool) -> str:
    b = BufferedTrigger
    one = f"AND {_col(b, 'agent_id')} = %s " if agent else ""
    return (
        f"SELECT {_col(b, 'agent_id')}, {_col(b, 'message_id')}, {_col(b, 'topic')}, "
        f"{_col(b, 'message_sequence')}, {_col(b, 'id')} FROM {_table(b)} "
        f"WHERE {_col(b, 'cluster')} = %s AND {_col(b, 'dropped')} = %s {one}"
        f"ORDER BY {_col(b, 'agent_id')} ASC, {_col(b, 'message_sequence')} ASC"
    )


def buffered_triggers(
    cluster_id: str, *, agent_id: str | None = None
) -> list[tuple[str, str, str, int, int]]:
    """(agent, message id, topic, sequence, row id) of the messages waiting in the cluster's
    buffers (``agent_id``: in that agent's only), by agent then sequence."""
    params: list[Any] = [cluster_id, False, *([] if agent_id is None else [agent_id])]
    return [
        (str(a), str(m), str(t), int(s), int(r))
        for a, m, t, s, r in _rows(_buffered_sql(connection.vendor, agent_id is not None), params)
    ]


@lru_cache(maxsize=64)
def _buffer_rows_sql(vendor: str, count: int, *, drop: bool) -> str:
    b = BufferedTrigger
    action = (
        f"UPDATE {_table(b)} SET {_col(b, 'dropped')} = %s" if drop else f"DELETE FROM {_table(b)}"
    )
    rows = ", ".join(["%s"] * count)
    return f"{action} WHERE {_col(b, 'cluster')} = %s AND {_col(b, 'id')} IN ({rows})"


def buffer_rows_delete(*, cluster_id: str, ids: Sequence[int]) -> int:
    """Delete the cluster's buffer rows ``ids`` (their triggers were judged); the rows gone."""
    sql = _buffer_rows_sql(connection.vendor, len(ids), drop=False)
    return _count(sql, [cluster_id, *ids])


def buffer_rows_drop(*, cluster_id: str, ids: Sequence[int]) -> int:
    """Mark the cluster's buffer rows ``ids`` dropped (newer ones waited past the limit)."""
    sql = _buffer_rows_sql(connection.vendor, len(ids), drop=True)
    return _count(sql, [True, cluster_id, *ids])


@cache
def _queued_before_sql(vendor: str) -> str:
    t, cluster, agent = _table(Task), _col(Task, "cluster"), _col(Task, "agent_id")
    return (
        f"SELECT ({_iteration_sql(vendor)}), EXISTS (SELECT 1 FROM {t} WHERE {cluster} = %s "
        f"AND {agent} = %s AND {_col(Task, 'trigger_message_id')} = %s)"
    )


def agent_tasks_and_trigger(*, cluster_id: str, agent_id: str, message_id: str) -> tuple[int, bool]:
    """How many tasks the agent has had (as ``agent_iteration``), and whether ``message_id``
    triggered one of them: two index seeks, however long the agent's history."""
    params = [cluster_id, agent_id, cluster_id, agent_id, message_id]
    rows = _rows(_queued_before_sql(connection.vendor), params)
    count, triggered = rows[0]
    return int(count or 0), bool(triggered)


@cache
def _settle_sql(vendor: str) -> str:
    settled = _col(Task, "settled_sequence")
    return (
        f"UPDATE {_table(Task)} SET {settled} = %s WHERE {_col(Task, 'id')} = %s "
        f"AND {settled} IS NULL"
    )


def task_settle(*, task_id: str, sequence: int) -> None:
    """Mark the task's end as offered at ``sequence`` (once)."""
    _count(_settle_sql(connection.vendor), [sequence, task_id], prepare=True)


# --- each agent's activity (the cluster page, its agents panel) --------------------------------


@cache
def _open_tasks_sql(vendor: str) -> str:
    return (
        f"SELECT {_task_columns(vendor)} FROM {_table(Task)} WHERE {_col(Task, 'cluster')} = %s "
        f"AND {_col(Task, 'state')} IN (%s, %s, %s) "
        f"ORDER BY {_col(Task, 'created_at')} ASC, {_col(Task, 'id')} ASC"
    )


def open_tasks(cluster_id: str) -> list[Task]:
    """The cluster's queued, claimed and expired tasks, the oldest first."""
    params = [cluster_id, _QUEUED, _CLAIMED, _EXPIRED]
    return [_task(r) for r in _rows(_open_tasks_sql(connection.vendor), params)]


@cache
def _finished_counts_sql(vendor: str) -> str:
    agent, state = _col(Task, "agent_id"), _col(Task, "state")
    return (
        f"SELECT {agent}, {state}, COUNT(*), MAX({_col(Task, 'created_at')}) FROM {_table(Task)} "
        f"WHERE {_col(Task, 'cluster')} = %s AND NOT ({state} IN (%s, %s, %s)) "
        f"GROUP BY {agent}, {state}"
    )


def finished_counts(cluster_id: str) -> list[tuple[str, str, int, int]]:
    """(agent, state, tasks, the newest one's ``created_at``) of the cluster's finished tasks:
    a few rows per agent, read on ``task_agent_queue``, which covers the query."""
    params = [cluster_id, _QUEUED, _CLAIMED, _EXPIRED]
    return [
        (agent, state, int(n), int(newest))
        for agent, state, n, newest in _rows(_finished_counts_sql(connection.vendor), params)
    ]


@cache
def _buffered_counts_sql(vendor: str) -> str:
    agent, dropped = _col(BufferedTrigger, "agent_id"), _col(BufferedTrigger, "dropped")
    return (
        f"SELECT {agent}, {dropped}, COUNT(*) FROM {_table(BufferedTrigger)} "
        f"WHERE {_col(BufferedTrigger, 'cluster')} = %s GROUP BY {agent}, {dropped}"
    )


def buffered_counts(cluster_id: str) -> list[tuple[str, bool, int]]:
    """(agent, dropped, triggers) of the triggers the cluster's agents' buffers hold or
    dropped."""
    rows = _rows(_buffered_counts_sql(connection.vendor), [cluster_id])
    return [(agent, bool(dropped), int(n)) for agent, dropped, n in rows]
