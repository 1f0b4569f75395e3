"""Websocket routes of every app."""

from __future__ import annotations

from dashboard.routing import websocket_urlpatterns as dashboard_routes
from ledger.routing import websocket_urlpatterns as ledger_routes

websocket_urlpatterns = [*ledger_routes, *dashboard_routes]
