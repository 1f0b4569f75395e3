from __future__ import annotations

from django.urls import path

from ledger.consumers import ClusterMessagesConsumer, ClusterTimelineConsumer

websocket_urlpatterns = [
    path("ws/clusters/<str:cluster_id>/", ClusterMessagesConsumer.as_asgi()),
    path("ws/clusters/<str:cluster_id>/timeline/", ClusterTimelineConsumer.as_asgi()),
]
