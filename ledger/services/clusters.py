"""Creating clusters and changing their state (SPEC §1.2)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from contextlib import AbstractContextManager

from django.conf import settings
from django.db import IntegrityError, transaction

from ledger.errors import Conflict, InvalidInput
from ledger.labels import labels_parse
from ledger.models import Cluster, ClusterState
from ledger.records import JSON, ClusterRecord
from ledger.selectors import cluster_record
from ledger.services.names import ADJECTIVES, NOUNS
from ledger.services.publish import now_ms
from ledger.services.writer import ClusterWriter, cluster_transaction
from ledger.validation import (
    JsonValueError,
    agent_ids_problems,
    json_encode_checked,
    text_problem,
    timestamp_problem,
)

CLUSTER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


def cluster_id_generate() -> str:
    """A fresh readable id such as ``amber-comet-17`` (not checked for uniqueness here)."""
    return f"{secrets.choice(ADJECTIVES)}-{secrets.choice(NOUNS)}-{secrets.randbelow(100)}"


def cluster_create(
    *,
    cluster_id: str | None = None,
    config: Mapping[str, JSON] | None = None,
    template: str = "",
    params: Mapping[str, JSON] | None = None,
    state: str = ClusterState.INITIALIZING,
    created_at: int | None = None,
    labels: object = None,
) -> ClusterRecord:
    """Create a cluster; without an id, a readable one is generated. ``labels``: which runner
    pool serves it (``ledger.labels.labels_parse``)."""
    row = _cluster_row(
        cluster_id=cluster_id,
        config=config,
        template=template,
        params=params,
        state=state,
        created_at=created_at,
    )
    row.labels = labels_parse(labels)
    for _ in range(20):
        row.pk = cluster_id or cluster_id_generate()
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError as error:
            if cluster_id is not None:
                raise Conflict(
                    f"cluster {cluster_id!r} already exists", details={"cluster_id": cluster_id}
                ) from error
            continue
        return cluster_record(row)
    raise Conflict("could not find a free cluster id; give one explicitly")


def cluster_create_transaction(
    *,
    cluster_id: str,
    config: Mapping[str, JSON] | None = None,
    template: str = "",
    params: Mapping[str, JSON] | None = None,
    state: str = ClusterState.RUNNING,
    created_at: int | None = None,
    labels: object = None,
) -> AbstractContextManager[ClusterWriter]:
    """A write transaction (``cluster_transaction``) that creates the cluster first: unless
    everything written commits, the cluster does not exist either. For imports: a source that
    fails halfway leaves nothing behind, not even an empty cluster. The fields are checked
    here, before the transaction opens."""
    row = _cluster_row(
        cluster_id=cluster_id,
        config=config,
        template=template,
        params=params,
        state=state,
        created_at=created_at,
    )
    row.pk = cluster_id
    row.labels = labels_parse(labels)
    return cluster_transaction(cluster_id, new=row)


def _cluster_row(
    *,
    cluster_id: str | None,
    config: Mapping[str, JSON] | None,
    template: str,
    params: Mapping[str, JSON] | None,
    state: str,
    created_at: int | None,
) -> Cluster:
    """An unsaved cluster row, every field checked (SPEC §1.2, ``ledger.validation``)."""
    if cluster_id is not None and (
        not isinstance(cluster_id, str) or not CLUSTER_ID_RE.fullmatch(cluster_id)
    ):
        raise InvalidInput(
            "cluster id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
            details={"field": "id", "value": repr(cluster_id)},
        )
    if state not in ClusterState.values:
        raise InvalidInput(
            f"unknown cluster state {state!r}",
            details={"field": "state", "allowed": ClusterState.values},
        )
    config_dict = cluster_config_check(config)
    params_dict = dict(params or {})
    _json_check(params_dict, field="params")
    if template and (len(template) > 128 or text_problem(template) is not None):
        raise InvalidInput(
            "template must be a name of 1-128 storable characters", details={"field": "template"}
        )
    if created_at is not None and (problem := timestamp_problem(created_at)) is not None:
        raise InvalidInput(f"created_at {problem}", details={"field": "created_at"})
    return Cluster(
        # The caller sets the id when it is to be generated.
        id=cluster_id or "",
        created_at=created_at if created_at is not None else now_ms(),
        state=state,
        config=config_dict,
        template=template,
        params=params_dict,
    )


def cluster_config_check(config: Mapping[str, JSON] | None) -> dict[str, JSON]:
    """A cluster config as it may be stored: an object whose ``agents`` is a list of objects,
    each with an id of SPEC §4, unique; JSON a database can store (``ledger.validation``)."""
    if config is not None and not isinstance(config, Mapping):
        raise InvalidInput("config must be an object", details={"field": "config"})
    config_dict = dict(config or {})
    agents = config_dict.get("agents", [])
    if not isinstance(agents, list) or not all(isinstance(a, dict) for a in agents):
        raise InvalidInput(
            "config.agents must be a list of objects", details={"field": "config.agents"}
        )
    for where, problem in agent_ids_problems(agents, where="config.agents"):
        raise InvalidInput(f"{where} {problem}", details={"field": where})
    seen: set[str] = set()
    for index, agent in enumerate(agents):
        if agent["id"] in seen:
            where = f"config.agents[{index}].id"
            raise InvalidInput(
                f"{where} {agent['id']!r} is used by another agent of the config",
                details={"field": where},
            )
        seen.add(agent["id"])
    _json_check(config_dict, field="config")
    return config_dict


def _json_check(value: JSON, *, field: str) -> None:
    try:
        json_encode_checked(value, max_depth=settings.LEDGER_MAX_JSON_DEPTH)
    except JsonValueError as error:
        where = f"{field}{error.path}"
        raise InvalidInput(f"{where} {error.problem}", details={"field": where}) from None


def cluster_state_set(*, cluster_id: str, state: str) -> None:
    """Move a cluster to one of the states of SPEC §1.2."""
    with cluster_transaction(cluster_id) as writer:
        writer.state_set(state)
