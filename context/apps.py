from __future__ import annotations

from django.apps import AppConfig


class ContextConfig(AppConfig):
    name = "context"
    verbose_name = "Context engine"

    def ready(self) -> None:
        # Imported here: the snapshotter reaches the ledger, which needs the app registry.
        from context.snapshotter import snapshotter

        snapshotter.connect()
