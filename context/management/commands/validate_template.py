"""``python manage.py validate_template PATH``: check a template file without saving it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from context.management.commands.import_template import read_template
from context.services.templates import template_check


class Command(BaseCommand):
    help = "Check a cluster template file; exit code 1 when it has errors, 0 otherwise."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", metavar="PATH")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["path"])
        check = template_check(read_template(path))
        for error in check.errors:
            self.stdout.write(f"error: {error.get('message', error)}")
        for warning in check.warnings:
            self.stdout.write(f"warning: {warning.get('message', warning)}")
        summary = f"{path}: {len(check.errors)} errors, {len(check.warnings)} warnings"
        if check.errors:
            raise CommandError(summary, returncode=1)
        self.stdout.write(summary)
