"""``python manage.py export_cluster ID [--format json|jsonl] [--output FILE]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.errors import ServiceError
from ledger.exporting import EXPORT_FORMATS, cluster_export


class Command(BaseCommand):
    help = (
        "Export a cluster's ledger in sequence order: jsonl (one message per line) or json "
        '({"cluster": {...}, "messages": [...]}). Streamed, so memory stays flat.'
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster_id", metavar="ID")
        parser.add_argument("--format", choices=EXPORT_FORMATS, default="jsonl")
        parser.add_argument("--output", metavar="FILE", help="write here instead of stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            chunks = cluster_export(cluster_id=options["cluster_id"], format=options["format"])
            if options["output"]:
                with Path(options["output"]).open("w", encoding="utf-8") as file:
                    file.writelines(chunks)
            else:
                for chunk in chunks:
                    self.stdout.write(chunk, ending="")
        except ServiceError as error:
            raise CommandError(error.message) from error
        except OSError as error:
            raise CommandError(f"cannot write {options['output']}: {error}") from error
