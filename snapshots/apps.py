from __future__ import annotations

from django.apps import AppConfig


class SnapshotsConfig(AppConfig):
    name = "snapshots"
    verbose_name = "State snapshots"

    def ready(self) -> None:
        # Imported here: the snapshotter reaches the ledger, which needs the app registry.
        from snapshots.snapshotter import snapshotter

        snapshotter.connect()
