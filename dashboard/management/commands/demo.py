"""``python manage.py demo``: a few realistic clusters and a demo operator, once.

``--record`` runs the demo's scenarios from their templates and writes ``recorded.json`` again
(on an empty database: ``make demo-record``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from dashboard.demo.loading import DEMO_PASSWORD, DEMO_USERNAME, demo_load, demo_operator_ensure
from dashboard.demo.recording import RECORDED, demo_record


class Command(BaseCommand):
    help = "Fill an empty database with demo clusters and a demo operator (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--record",
            action="store_true",
            help="run the demo's scenarios from their templates and write their recording",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["record"]:
            recorded = demo_record()
            self.stdout.write(f"Recorded {', '.join(recorded)} in {RECORDED}.")
            return
        if demo_operator_ensure():
            self.stdout.write(f"Demo operator: {DEMO_USERNAME} / {DEMO_PASSWORD} (local use only)")
        added = demo_load()
        self.stdout.write(f"Demo data ready ({added} clusters added).")
