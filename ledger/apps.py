from __future__ import annotations

from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        # Imported here: the pipeline reads the models, which need the app registry.
        from ledger.pipeline import pipeline_connect

        pipeline_connect()
