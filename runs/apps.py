from __future__ import annotations

from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"

    def ready(self) -> None:
        from django.conf import settings

        from runs.logic.engine import sandbox_pool_configure

        sandbox_pool_configure(size=settings.RUNS_SANDBOX_POOL_SIZE)
        # Imported here: the dispatcher reads the ledger, which needs the app registry.
        from runs.dispatch import dispatcher

        dispatcher.connect()
