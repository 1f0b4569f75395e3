"""``python manage.py import_cluster FILE [--cluster ID]``: read back an ``export_cluster`` file."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.errors import ServiceError
from ledger.exporting import cluster_import


class Command(BaseCommand):
    help = (
        "Import a file written by export_cluster (json or jsonl) with the same ids, timestamps "
        "and order; the cluster is created when missing, messages already present are skipped."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", metavar="FILE")
        parser.add_argument(
            "--cluster",
            default=None,
            metavar="ID",
            help="the cluster to import into (default: the one named in the export)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            result = cluster_import(path=options["file"], cluster_id=options["cluster"])
        except ServiceError as error:
            raise CommandError(error.message) from error
        new = " (new cluster)" if result.created else ""
        self.stdout.write(
            f"{result.cluster_id}: imported {result.imported}, skipped {result.skipped}{new}"
        )
