"""Routes of the operator's endpoints, mounted at the site's root."""

from __future__ import annotations

from django.urls import path

from operations import views

app_name = "operations"

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", views.metrics, name="metrics"),
]
