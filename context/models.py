"""Recorded context builds: when an agent was given a prompt, and what decided its content."""

from __future__ import annotations

from django.db import models


class ContextBuild(models.Model):
    """One recorded build (SPEC §2.2, §6.2). Previews are never stored."""

    cluster = models.ForeignKey(
        "ledger.Cluster", on_delete=models.CASCADE, related_name="context_builds", db_index=False
    )
    agent_id = models.CharField(max_length=128)
    role = models.CharField(max_length=128, blank=True, default="")
    iteration = models.PositiveIntegerField()
    started_at = models.BigIntegerField(help_text="ms; the next build's last_agent_start")
    trigger_message_id = models.CharField(max_length=128, blank=True, default="")
    trigger_topic = models.CharField(max_length=64, blank=True, default="")
    as_of_sequence = models.BigIntegerField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField()
    final_tokens = models.PositiveIntegerField()
    metrics = models.JSONField()
    # The included packs' final texts in prompt order, [[pack id, text], ...]: the prompt is their
    # concatenation, and two builds can be compared pack by pack.
    pack_texts = models.JSONField(default=list)

    class Meta:
        indexes = (
            models.Index(fields=["cluster", "agent_id", "-started_at"], name="build_agent_recent"),
            models.Index(fields=["cluster", "-started_at"], name="build_cluster_recent"),
        )

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.agent_id}#{self.iteration}"
