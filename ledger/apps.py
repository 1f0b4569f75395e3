from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _search_index_ensure(*, using: str = "default", **kwargs: Any) -> None:
    from ledger.search import search_index_ensure

    search_index_ensure(using=using)


class LedgerConfig(AppConfig):
    name = "ledger"
    verbose_name = "Ledger"

    def ready(self) -> None:
        # Imported here: the pipeline reads the models, which need the app registry.
        from ledger.pipeline import pipeline_connect

        pipeline_connect()
        # A migration that rebuilds the message table on SQLite drops the search triggers;
        # after every migrate they are put back (ledger.search.search_index_ensure).
        post_migrate.connect(_search_index_ensure, sender=self, dispatch_uid="ledger-search")
