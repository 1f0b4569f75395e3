"""``python manage.py demo``: a few realistic clusters and a demo operator, once."""

from __future__ import annotations

import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

from ledger.demo.data import CLUSTERS
from ledger.models import Cluster
from ledger.services import ImportedMessage, cluster_create, message_import_batch, now_ms

DEMO_USERNAME = "operator"
DEMO_PASSWORD = "zeroshot-demo"  # for local use only; the README says so


class Command(BaseCommand):
    help = "Fill an empty database with demo clusters and a demo operator (idempotent)."

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        if not user_model.objects.filter(username=DEMO_USERNAME).exists():
            user_model.objects.create_superuser(DEMO_USERNAME, password=DEMO_PASSWORD)
            self.stdout.write(f"Demo operator: {DEMO_USERNAME} / {DEMO_PASSWORD} (local use only)")
        created = 0
        for spec in CLUSTERS:
            if Cluster.objects.filter(pk=spec["id"]).exists():
                continue
            start = now_ms() - spec["minutes_ago"] * 60_000
            cluster_create(
                cluster_id=spec["id"],
                config={"agents": spec["agents"]},
                template=spec["template"],
                created_at=start,
            )
            step = max(1, spec["minutes_ago"] * 60_000 // (len(spec["messages"]) + 2))
            messages = [
                ImportedMessage(
                    id=f"msg_{secrets.token_hex(16)}",
                    timestamp=start + (i + 1) * step,
                    topic=m["topic"],
                    sender=m["sender"],
                    receiver=m.get("receiver", "broadcast"),
                    content=m.get("content", {}),
                    metadata=m.get("metadata"),
                )
                for i, m in enumerate(spec["messages"])
            ]
            message_import_batch(cluster_id=spec["id"], messages=messages)
            Cluster.objects.filter(pk=spec["id"]).update(state=spec["state"])
            created += 1
        self.stdout.write(f"Demo data ready ({created} clusters added).")
