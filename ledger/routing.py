"""The agents' websocket (SPEC §6.3)."""

from __future__ import annotations

from django.urls import path

from ledger.consumers import ClusterMessagesConsumer

websocket_urlpatterns = [
    path("ws/clusters/<str:cluster_id>/", ClusterMessagesConsumer.as_asgi()),
]
