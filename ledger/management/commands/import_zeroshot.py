"""``python manage.py import_zeroshot PATH… [--follow] [--poll SECONDS]``: zeroshot ledgers in."""

from __future__ import annotations

import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper

from ledger.errors import ServiceError
from ledger.importing import ImportReport, zeroshot_follow, zeroshot_import
from ledger.records import MessageRecord

# Below this many rows a ledger imports in a blink: no bar unless someone watches a terminal.
PROGRESS_MIN_ROWS = 10_000
BAR_WIDTH = 30


class ProgressBar:
    """A text bar on one line of stderr, redrawn in place."""

    def __init__(self, stream: OutputWrapper) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self.decile = -1

    def __call__(self, cluster_id: str, done: int, total: int) -> None:
        if not self.tty and total <= PROGRESS_MIN_ROWS:
            return
        filled = BAR_WIDTH * done // total if total else BAR_WIDTH
        percent = 100 * done // total if total else 100
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        line = f"{cluster_id} [{bar}] {percent:3d}% {done}/{total}"
        # A terminal is redrawn every batch; a pipe or log file gets a line per 10 %.
        if self.tty:
            self.stream.write(f"\r{line}", ending="\n" if done >= total else "")
        elif percent // 10 != self.decile:
            self.stream.write(line)
            self.decile = percent // 10
        self.stream.flush()


class Command(BaseCommand):
    help = (
        "Import zeroshot ledgers (a .db file, or a ~/.zeroshot-style folder with clusters.json). "
        "The sources are read through copies and never changed; re-running imports nothing twice."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH", help="a .db file or a folder")
        parser.add_argument(
            "--follow",
            action="store_true",
            help="keep importing new rows as zeroshot writes them, until interrupted",
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=0.5,
            metavar="SECONDS",
            help="with --follow: how often to look for new rows (default 0.5)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["poll"] <= 0:
            raise CommandError("--poll must be a positive number of seconds")
        progress = ProgressBar(self.stderr)
        try:
            if options["follow"]:
                report = self._follow(options["paths"], options["poll"], progress)
            else:
                report = zeroshot_import(path=options["paths"], progress=progress)
        except ServiceError as error:
            raise CommandError(error.message) from error
        self._summary(report)

    def _follow(self, paths: list[str], poll: float, progress: ProgressBar) -> ImportReport:
        stop = threading.Event()

        def show(records: list[MessageRecord]) -> None:
            self.stdout.write(f"{records[0].cluster_id}: +{len(records)} messages")

        self.stderr.write("Following; press Ctrl-C to stop.")
        try:
            return zeroshot_follow(
                path=paths, poll_interval=poll, stop=stop, on_message=show, progress=progress
            )
        except KeyboardInterrupt:
            stop.set()
            return ImportReport()

    def _summary(self, report: ImportReport) -> None:
        for source in report.unreadable:
            self.stderr.write(f"{source.path}: not imported: {source.error}")
        for ledger in report.ledgers:
            if ledger.error is not None:
                self.stderr.write(f"{ledger.cluster_id}: not imported: {ledger.error}")
                continue
            new = " (new cluster)" if ledger.created else ""
            unreadable = (
                f", {ledger.json_unreadable} with unreadable JSON in content_data or metadata "
                "(stored as null)"
                if ledger.json_unreadable
                else ""
            )
            self.stdout.write(
                f"{ledger.cluster_id}: imported {ledger.imported}, skipped {ledger.skipped}"
                f"{unreadable}{new}"
            )
        failures = len(report.failed) + len(report.unreadable)
        if failures:
            raise CommandError(
                f"{failures} source(s) could not be imported; nothing of them was stored"
            )
