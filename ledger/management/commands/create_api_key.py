"""``python manage.py create_api_key NAME [--cluster ID]``: prints the new key on its last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.errors import ServiceError
from ledger.keys import api_key_create


class Command(BaseCommand):
    help = "Create an API key for agents. The key is shown once, on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="who or what uses the key, e.g. worker-pool-1")
        parser.add_argument("--cluster", default=None, help="limit the key to one cluster")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            identity, plain = api_key_create(name=options["name"], cluster_id=options["cluster"])
        except ServiceError as error:
            raise CommandError(error.message) from error
        scope = f"cluster {identity.cluster_id}" if identity.cluster_id else "all clusters"
        self.stderr.write(f"Created key {identity.name!r} for {scope}. It is shown only once:")
        self.stdout.write(plain)
