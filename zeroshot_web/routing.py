"""Websocket routes of every app."""

from __future__ import annotations

from ledger.routing import websocket_urlpatterns as ledger_routes

websocket_urlpatterns = [*ledger_routes]
