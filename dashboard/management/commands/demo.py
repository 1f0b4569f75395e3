"""``python manage.py demo``: a few realistic clusters and a demo operator, once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from dashboard.demo.loading import DEMO_PASSWORD, DEMO_USERNAME, demo_load, demo_operator_ensure


class Command(BaseCommand):
    help = "Fill an empty database with demo clusters and a demo operator (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        if demo_operator_ensure():
            self.stdout.write(f"Demo operator: {DEMO_USERNAME} / {DEMO_PASSWORD} (local use only)")
        added = demo_load()
        self.stdout.write(f"Demo data ready ({added} clusters added).")
