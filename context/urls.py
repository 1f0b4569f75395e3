"""Dashboard routes of the context engine (mounted at the site root)."""

from __future__ import annotations

from django.urls import path

from context import views

app_name = "context"

urlpatterns = [
    path(
        "clusters/<str:cluster_id>/agents/<str:agent_id>/",
        views.inspector_page,
        name="inspector",
    ),
    path(
        "clusters/<str:cluster_id>/agents/<str:agent_id>/diff/",
        views.build_diff_page,
        name="build_diff",
    ),
    path("clusters/<str:cluster_id>/metrics/", views.metrics_page, name="metrics"),
]
