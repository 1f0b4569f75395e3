"""A running cluster's config, changed by ``CLUSTER_OPERATIONS`` and kept version by version
(SPEC §7.7): the new config beside the old, with who changed it, by which message, the diff."""

from __future__ import annotations

from collections.abc import Mapping

from ledger import statements
from ledger.errors import NotFound
from ledger.models import Cluster, ClusterConfigVersion
from ledger.records import JSON, ConfigVersionRecord
from ledger.services.writer import ClusterWriter


def cluster_config_change(
    writer: ClusterWriter,
    *,
    config: Mapping[str, JSON],
    sender: str,
    message_id: str,
    diff: list[JSON],
    now: int,
) -> int:
    """Store ``config`` as the cluster's next version and run it from now on; returns the
    version number. Inside the writer's transaction (the cluster row is locked)."""
    row = Cluster.objects.filter(pk=writer.cluster_id).values("config", "config_version").get()
    current = int(row["config_version"] or 1)
    versions = ClusterConfigVersion.objects.filter(cluster_id=writer.cluster_id)
    if not versions.filter(version=current).exists():
        # The config the cluster was created with becomes a version when the first change comes.
        ClusterConfigVersion.objects.create(
            cluster_id=writer.cluster_id,
            version=current,
            config=row["config"] if isinstance(row["config"], dict) else {},
            created_at=now,
        )
    version = current + 1
    ClusterConfigVersion.objects.create(
        cluster_id=writer.cluster_id,
        version=version,
        config=dict(config),
        sender=sender[:128],
        message_id=message_id[:128],
        diff=diff,
        created_at=now,
    )
    Cluster.objects.filter(pk=writer.cluster_id).update(config=dict(config), config_version=version)
    return version


def cluster_config_versions(*, cluster_id: str) -> list[ConfigVersionRecord]:
    """Every stored config of a cluster, oldest first (one prebuilt statement: the cluster
    page reads them on every load); ``[]`` before any change."""
    return statements.config_versions(cluster_id=cluster_id)


def cluster_config_at(*, cluster_id: str, version: int) -> ConfigVersionRecord:
    """One stored config of a cluster, or ``NotFound``."""
    row = ClusterConfigVersion.objects.filter(cluster_id=cluster_id, version=version).first()
    if row is None:
        raise NotFound(
            f"cluster {cluster_id!r} has no config version {version}",
            details={"cluster_id": cluster_id, "version": version},
        )
    return _record(row)


def _record(row: ClusterConfigVersion) -> ConfigVersionRecord:
    return ConfigVersionRecord(
        version=row.version,
        config=row.config if isinstance(row.config, dict) else {},
        sender=row.sender,
        message_id=row.message_id,
        diff=row.diff if isinstance(row.diff, list) else [],
        created_at=row.created_at,
    )
