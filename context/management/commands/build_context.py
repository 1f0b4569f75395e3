"""``python manage.py build_context CLUSTER AGENT [--max-tokens N] [--preview] [--json]``."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from context.metrics import build_summary
from context.services import context_build
from ledger.errors import ServiceError


class Command(BaseCommand):
    help = "Build an agent's context from the ledger and print the prompt (or JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("cluster")
        parser.add_argument("agent")
        parser.add_argument("--max-tokens", type=int, default=None)
        parser.add_argument("--preview", action="store_true", help="do not record the build")
        parser.add_argument("--as-of-sequence", type=int, default=None)
        parser.add_argument("--json", action="store_true", help="print {context, metrics}")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            outcome = context_build(
                cluster_id=options["cluster"],
                agent_id=options["agent"],
                max_tokens=options["max_tokens"],
                as_of_sequence=options["as_of_sequence"],
                preview=options["preview"],
            )
        except ServiceError as error:
            raise CommandError(error.message) from error
        if options["json"]:
            body = {
                "context": outcome.context,
                "metrics": outcome.metrics,
                "recorded": outcome.recorded,
                "build_id": outcome.build_id,
            }
            self.stdout.write(json.dumps(body, ensure_ascii=False, indent=2))
            return
        self.stdout.write(outcome.context, ending="")
        self.stderr.write(
            "\n-- "
            + build_summary(outcome.metrics, iteration=outcome.iteration)
            + f" · {'recorded' if outcome.recorded else 'preview'}"
        )
