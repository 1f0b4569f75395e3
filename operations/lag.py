"""The post-commit pipeline's lag: messages committed that its stages have not been offered.

One small function on purpose: when ``ledger.interfaces`` offers a per-cluster lag selector
(the pipeline's own), this module is the one place to switch to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import F

from ledger.models import Cluster, ClusterState

# Only clusters that can still get messages are read: the state index bounds the scan, and a
# cluster that ended has nothing left for the pipeline but what it had when it ended.
LIVE_STATES = (ClusterState.INITIALIZING, ClusterState.RUNNING, ClusterState.STOPPING)


@dataclass(frozen=True, slots=True)
class ClusterLag:
    """How many messages of one cluster the pipeline has not offered to its stages yet."""

    cluster_id: str
    state: str
    messages: int


def pipeline_lagging(*, limit: int = 100) -> list[ClusterLag]:
    """Live clusters whose pipeline cursor lags their last sequence, the most behind first.

    At most ``limit`` rows, read through the ``cluster_state_created`` index.
    """
    rows = (
        Cluster.objects.filter(state__in=LIVE_STATES, pipeline_sequence__lt=F("last_sequence"))
        .annotate(lag=F("last_sequence") - F("pipeline_sequence"))
        .order_by("-lag", "id")
        .values_list("id", "state", "lag")[:limit]
    )
    return [ClusterLag(cluster_id=c, state=s, messages=int(lag)) for c, s, lag in rows]
