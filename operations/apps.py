from __future__ import annotations

from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        from operations.metrics import subscribe
        from operations.tracing import tracing_configure

        subscribe()
        tracing_configure()
