"""/healthz and /readyz: liveness, and readiness over the database, the channel layer and the
pipeline's lag."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client, override_settings

from ledger.interfaces import ClusterState
from ledger.models import Cluster
from ledger.services import cluster_create, message_publish_batch
from ledger.services.drafts import MessageDraft

pytestmark = pytest.mark.django_db


def _publish(cluster_id: str, n: int) -> None:
    message_publish_batch(
        cluster_id=cluster_id,
        drafts=[
            MessageDraft(topic="NOTE", sender="a", content={"text": f"m{i}"}) for i in range(n)
        ],
    )


def test_healthz_answers_without_authentication() -> None:
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "alive"}
    assert "no-cache" in response["Cache-Control"]


def test_readyz_is_ready_with_every_check_passing() -> None:
    response = Client().get("/readyz")
    body: dict[str, Any] = response.json()
    assert response.status_code == 200, body
    assert body["status"] == "ready"
    assert set(body["checks"]) == {"database", "channel_layer", "pipeline"}
    assert all(check["ok"] for check in body["checks"].values())
    assert body["checks"]["pipeline"]["max_lag"] == 0


@override_settings(OPERATIONS_READY_MAX_PIPELINE_LAG=5)
def test_readyz_is_unready_while_a_live_cluster_lags_beyond_the_setting() -> None:
    # given a running cluster whose pipeline cursor is 8 messages behind
    cluster_create(cluster_id="behind")
    _publish("behind", 8)
    Cluster.objects.filter(pk="behind").update(state=ClusterState.RUNNING, pipeline_sequence=0)
    # and an ended cluster far behind, which no longer counts
    cluster_create(cluster_id="ended")
    _publish("ended", 20)
    Cluster.objects.filter(pk="ended").update(state=ClusterState.COMPLETED, pipeline_sequence=0)
    # when
    response = Client().get("/readyz")
    # then
    body = response.json()
    assert response.status_code == 503
    assert body["status"] == "unready"
    assert body["checks"]["pipeline"] == {
        "ok": False,
        "ms": body["checks"]["pipeline"]["ms"],
        "lagging_clusters": 1,
        "max_lag": 8,
        "max_lag_allowed": 5,
    }
    assert body["checks"]["database"]["ok"]
    # once the cursor catches up, ready again
    Cluster.objects.filter(pk="behind").update(pipeline_sequence=8)
    assert Client().get("/readyz").status_code == 200


@override_settings(
    CHANNEL_LAYERS={
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": "redis://127.0.0.1:1/0", "socket_connect_timeout": 1}]
            },
        }
    }
)
def test_readyz_is_unready_when_the_channel_layer_is_unreachable() -> None:
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    try:
        response = Client().get("/readyz")
    finally:
        channel_layers.backends.clear()
    body = response.json()
    assert response.status_code == 503
    assert body["checks"]["channel_layer"]["ok"] is False
    # the kind of failure only: no address, no message
    assert set(body["checks"]["channel_layer"]) == {"ok", "ms", "error"}
    assert body["checks"]["database"]["ok"]
    assert body["checks"]["pipeline"]["ok"]
