"""``manage.py prune_clusters --older-than 30d [--state completed,failed] [--export DIR]``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ledger.interfaces import now_ms
from operations.policy import ENDED_STATES, PolicyError, RetentionPolicy
from operations.retention import BATCH, PrunedCluster, clusters_prunable, clusters_prune


class Command(BaseCommand):
    help = (
        "Delete ended clusters without activity for a while, with their messages, context "
        "builds and tasks, in short batches; --export DIR first writes each one's JSON export "
        "(import_cluster reads it back)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--older-than", required=True, metavar="AGE", help="30d, 12h, 2w…")
        parser.add_argument(
            "--state",
            default="",
            metavar="STATES",
            help=f"comma-separated, among {','.join(ENDED_STATES)} (default: all of them)",
        )
        parser.add_argument("--export", metavar="DIR", help="export each cluster here first")
        parser.add_argument("--batch", type=int, default=BATCH, help="rows per transaction")
        parser.add_argument("--dry-run", action="store_true", help="list, delete nothing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            policy = RetentionPolicy.parse(
                older_than=options["older_than"], states=options["state"]
            )
        except PolicyError as error:
            raise CommandError(str(error)) from error
        if options["batch"] < 1:
            raise CommandError("--batch must be at least 1")
        if options["dry_run"]:
            for cluster_id in clusters_prunable(policy=policy, now_ms=now_ms()):
                self.stdout.write(cluster_id)
            return
        export_dir = Path(options["export"]) if options["export"] else None
        pruned = clusters_prune(
            policy=policy,
            now_ms=now_ms(),
            export_dir=export_dir,
            batch=options["batch"],
            on_pruned=self._report,
        )
        self.stdout.write(f"pruned {len(pruned)} cluster(s)")

    def _report(self, pruned: PrunedCluster) -> None:
        where = f", exported to {pruned.export}" if pruned.export else ""
        self.stdout.write(
            f"{pruned.cluster_id}: {pruned.messages} messages, {pruned.builds} builds, "
            f"{pruned.tasks} tasks{where}"
        )
