"""``python manage.py import_template PATH…``: load zeroshot template files (SPEC §4, §6.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from context.services.templates import template_save
from ledger.errors import ServiceError


def read_template(path: Path) -> Any:
    """The JSON of a template file; ``CommandError`` when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise CommandError(f"cannot read {path}: {error.strerror or error}") from error
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CommandError(f"{path} is not valid JSON: {error}") from error


class Command(BaseCommand):
    help = (
        "Import cluster templates from zeroshot template files. A template is named by the "
        "file's name field, or the file name without .json. Re-importing a changed file keeps "
        "the previous body as a version; an unchanged file changes nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")

    def handle(self, *args: Any, **options: Any) -> None:
        failed = 0
        for raw_path in options["paths"]:
            path = Path(raw_path)
            try:
                body = read_template(path)
                name = body.get("name") if isinstance(body, dict) else None
                name = name.strip() if isinstance(name, str) and name.strip() else path.stem
                saved = template_save(name=name, body=body, note=f"imported from {path.name}")
            except (CommandError, ServiceError) as error:
                failed += 1
                self.stderr.write(f"{path}: {error}")
                details = getattr(error, "details", None)
                problems = details.get("errors", []) if isinstance(details, dict) else []
                for problem in problems[1:]:
                    self.stderr.write(f"  - {problem.get('message', problem)}")
                continue
            record = saved.template
            self.stdout.write(
                f"{path}: {saved.status} template {record.name!r} (version {record.version}, "
                f"{record.agent_count} agents, {len(saved.warnings)} warnings)"
            )
        if failed:
            raise CommandError(f"{failed} of {len(options['paths'])} files failed to import")
