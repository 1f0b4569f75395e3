"""``python manage.py run_agents``: the agent runner, for local use (SPEC §7.6).

The runner itself (``python -m zeroshot_runner``) needs only a URL and a key and runs on any
machine; this command runs it next to a local server and, without ``--key``, makes a key for it.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ledger.interfaces import api_key_create
from zeroshot_runner.cli import main as runner_main


class Command(BaseCommand):
    help = (
        "Claim tasks from this server and run their agents (the options of "
        "python -m zeroshot_runner; without --key, a key is made for the runner)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("runner_args", nargs="*", help="options for the runner, after --")

    def run_from_argv(self, argv: list[str]) -> None:
        # Everything after the command name belongs to the runner's own parser.
        self._runner_argv = argv[2:]
        super().run_from_argv(argv[:2])

    def handle(self, *args: Any, **options: Any) -> None:
        argv = list(getattr(self, "_runner_argv", options.get("runner_args") or []))
        wants_help = {"-h", "--help"} & set(argv)
        if not wants_help and "--key" not in argv and not os.environ.get("ZEROSHOT_WEB_KEY"):
            _, key = api_key_create(name="local runner")
            os.environ["ZEROSHOT_WEB_KEY"] = key
        raise SystemExit(runner_main(argv))
