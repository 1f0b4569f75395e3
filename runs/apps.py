from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        # Imported here: the dispatcher reads the ledger, which needs the app registry.
        from runs.dispatch import dispatcher

        dispatcher.connect()
