"""The dashboard's websocket: the cluster page's live timeline."""

from __future__ import annotations

from django.urls import path

from dashboard.consumers import ClusterTimelineConsumer

websocket_urlpatterns = [
    path("ws/clusters/<str:cluster_id>/timeline/", ClusterTimelineConsumer.as_asgi()),
]
