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
    # What the model billed for the prompt, as the agent reported it when its task completed
    # ({inputTokens, outputTokens, model?, costUsd?}): the estimate's reality check.
    reported_usage = models.JSONField(null=True, blank=True)
    # The guidance mailbox (SPEC §7.8): the sequence of the newest guidance message this build's
    # prompt carried (None: it carried none), and whether it reached its agent for good: a task's
    # build once the task completed (zeroshot's rule), a build made over the API at once.
    guidance_through = models.BigIntegerField(null=True, blank=True)
    guidance_delivered = models.BooleanField(default=False)
    # The cluster's config version the build was made under (SPEC §2.2, §7.7).
    config_version = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        indexes = (
            models.Index(fields=["cluster", "agent_id", "-started_at"], name="build_agent_recent"),
            models.Index(fields=["cluster", "-started_at"], name="build_cluster_recent"),
            # The guidance mailbox's cursor (``build_previous``): one seek, not a read of every
            # build the agent had (docs/decisions/0263).
            models.Index(
                fields=["cluster", "agent_id", "guidance_delivered", "guidance_through"],
                name="build_guidance_delivered",
            ),
        )

    def __str__(self) -> str:
        return f"{self.cluster_id}/{self.agent_id}#{self.iteration}"


class ClusterTemplate(models.Model):
    """A cluster template (SPEC §4) in zeroshot's JSON shape; changes are kept as versions."""

    name = models.CharField(max_length=200, unique=True)
    description = models.TextField(blank=True, default="")
    body = models.JSONField(help_text="{name, description, params, agents}, as zeroshot writes it")
    builtin = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class ClusterTemplateVersion(models.Model):
    """One saved body of a template; the newest version is the template's current body."""

    template = models.ForeignKey(ClusterTemplate, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    body = models.JSONField()
    note = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("template", "-version")
        constraints = (
            models.UniqueConstraint(fields=["template", "version"], name="template_version_unique"),
        )

    def __str__(self) -> str:
        return f"{self.template} v{self.version}"
