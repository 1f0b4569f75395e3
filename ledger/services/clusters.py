"""Creating clusters and changing their state (SPEC §1.2)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from django.db import IntegrityError, transaction

from ledger.errors import Conflict, InvalidInput
from ledger.models import Cluster, ClusterState
from ledger.records import JSON, ClusterRecord
from ledger.selectors import cluster_record
from ledger.services.names import ADJECTIVES, NOUNS
from ledger.services.publish import now_ms
from ledger.services.writer import cluster_transaction

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
) -> ClusterRecord:
    """Create a cluster; without an id, a readable one is generated."""
    if cluster_id is not None and not CLUSTER_ID_RE.match(cluster_id):
        raise InvalidInput(
            "cluster id must match ^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
            details={"field": "id", "value": cluster_id},
        )
    if state not in ClusterState.values:
        raise InvalidInput(
            f"unknown cluster state {state!r}",
            details={"field": "state", "allowed": ClusterState.values},
        )
    if config is not None and not isinstance(config, Mapping):
        raise InvalidInput("config must be an object", details={"field": "config"})
    config_dict = dict(config or {})
    agents = config_dict.get("agents", [])
    if not isinstance(agents, list) or not all(isinstance(a, dict) for a in agents):
        raise InvalidInput(
            "config.agents must be a list of objects", details={"field": "config.agents"}
        )
    for _ in range(20):
        candidate = cluster_id or cluster_id_generate()
        try:
            with transaction.atomic():
                cluster = Cluster.objects.create(
                    id=candidate,
                    created_at=created_at if created_at is not None else now_ms(),
                    state=state,
                    config=config_dict,
                    template=template,
                    params=dict(params or {}),
                )
        except IntegrityError as error:
            if cluster_id is not None:
                raise Conflict(
                    f"cluster {cluster_id!r} already exists", details={"cluster_id": cluster_id}
                ) from error
            continue
        return cluster_record(cluster)
    raise Conflict("could not find a free cluster id; give one explicitly")


def cluster_state_set(*, cluster_id: str, state: str) -> None:
    """Move a cluster to one of the states of SPEC §1.2."""
    with cluster_transaction(cluster_id) as writer:
        writer.state_set(state)
