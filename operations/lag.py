"""The post-commit pipeline's lag: messages committed that its stages have not been offered.

Read through the ledger's own selector (``ledger.interfaces.pipeline_lags``: one query on the
partial index that holds only lagging clusters), so the operator's numbers are the pipeline's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledger.interfaces import now_ms, pipeline_lags
from ledger.models import Cluster, ClusterState

# Clusters that can still get messages. Readiness looks at these only: an ended cluster's lag is
# still the pipeline's work (the metrics count it), but it never makes a server unready.
LIVE_STATES = (ClusterState.INITIALIZING, ClusterState.RUNNING, ClusterState.STOPPING)


@dataclass(frozen=True, slots=True)
class ClusterLag:
    """How many messages of one cluster the pipeline has not offered to its stages yet, and
    how long the first of them has waited (ms)."""

    cluster_id: str
    messages: int
    oldest_age_ms: int


def pipeline_lagging(*, limit: int = 100, live_only: bool = False) -> list[ClusterLag]:
    """Clusters whose pipeline cursor lags their last sequence, the longest-waiting first; at
    most ``limit`` read (one query; with ``live_only`` one more, on their primary keys)."""
    lags = pipeline_lags(now=now_ms(), limit=limit)
    if live_only and lags:
        live = set(
            Cluster.objects.filter(
                pk__in=[lag.cluster_id for lag in lags], state__in=LIVE_STATES
            ).values_list("pk", flat=True)
        )
        lags = [lag for lag in lags if lag.cluster_id in live]
    return [
        ClusterLag(
            cluster_id=lag.cluster_id,
            messages=lag.undispatched,
            oldest_age_ms=lag.oldest_age_ms or 0,
        )
        for lag in lags
    ]
