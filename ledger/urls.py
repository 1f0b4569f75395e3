from __future__ import annotations

from django.urls import path

from ledger import views

urlpatterns = [
    path("", views.cluster_list_page, name="clusters"),
]
