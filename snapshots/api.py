"""The agents' API for the state snapshot (SPEC §6.1)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from ledger.interfaces import (
    READ_ERRORS,
    MessageOut,
    NotFound,
    cluster_get,
    error_responses,
    pipeline,
    require_cluster,
)
from snapshots.snapshotter import snapshot_latest

router = Router(tags=["snapshots"])


@router.get(
    "/clusters/{cluster_id}/snapshot",
    response={200: MessageOut, **error_responses(*READ_ERRORS)},
    summary="The newest state snapshot",
    exclude_unset=True,
)
def snapshot_get(request: HttpRequest, cluster_id: str) -> dict[str, Any]:
    require_cluster(request, cluster_id)
    cluster_get(cluster_id=cluster_id)
    # Read-your-writes: the snapshot holds every message whose publish has returned.
    pipeline.caught_up(cluster_id)
    snapshot = snapshot_latest(cluster_id=cluster_id)
    if snapshot is None:
        raise NotFound(
            f"cluster {cluster_id!r} has no state snapshot yet",
            details={"cluster_id": cluster_id},
        )
    return snapshot.to_wire()
