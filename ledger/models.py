"""Clusters, their messages and the API keys that agents use."""

from __future__ import annotations

from django.db import models


class ClusterState(models.TextChoices):
    INITIALIZING = "initializing"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    COMPLETED = "completed"
    FAILED = "failed"
    KILLED = "killed"


class Cluster(models.Model):
    """One run of cooperating agents (SPEC §1.2); the row also allocates message sequences."""

    id = models.CharField(primary_key=True, max_length=128)
    created_at = models.BigIntegerField(help_text="Milliseconds since the Unix epoch.")
    # A cluster runs its agents once started (SPEC §7.4); until then nothing triggers.
    state = models.CharField(
        max_length=16, choices=ClusterState.choices, default=ClusterState.INITIALIZING
    )
    config = models.JSONField(default=dict, blank=True)
    template = models.CharField(max_length=128, blank=True, default="")
    params = models.JSONField(default=dict, blank=True)
    # Allocated inside the write transaction, under the row lock: the sequence of the newest
    # message (0 before the first) and its timestamp, so that the next publish needs no scan.
    last_sequence = models.BigIntegerField(default=0)
    last_timestamp = models.BigIntegerField(default=0)
    # The post-commit pipeline's cursor: every message up to it has been offered to its stages
    # (ledger/pipeline.py). Lags ``last_sequence`` between a commit and the pipeline's run.
    pipeline_sequence = models.BigIntegerField(default=0, db_default=0)
    # Which runners may serve it (runner pools): a claim that asks for labels only gets tasks of
    # clusters carrying every one (``ledger.labels``, SPEC §7.4).
    labels = models.JSONField(default=dict, blank=True, db_default={})
    # Which stored config it runs: 1 is the config it was created with; each successful
    # ``CLUSTER_OPERATIONS`` chain adds a ``ClusterConfigVersion`` and moves this on (SPEC §7.7).
    config_version = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        ordering = ("-created_at",)
        indexes = (
            models.Index(fields=["state", "-created_at"], name="cluster_state_created"),
            # Only the clusters whose pipeline lags: the sweep and the lag report read it.
            models.Index(
                fields=["id"],
                condition=models.Q(pipeline_sequence__lt=models.F("last_sequence")),
                name="cluster_pipeline_lagging",
            ),
        )

    def __str__(self) -> str:
        return self.id


class ClusterConfigVersion(models.Model):
    """One config a cluster ran (SPEC §7.7): who changed it, by which message, and the diff.

    Version 1 (the config the cluster was created with) is stored when the first change comes.
    """

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="config_versions", db_index=False
    )
    version = models.PositiveIntegerField()
    config = models.JSONField(default=dict, blank=True)
    sender = models.CharField(max_length=128, blank=True, default="")
    message_id = models.CharField(max_length=128, blank=True, default="")
    # What changed, agent by agent: ``[{"agent": id, "change": "added"|"removed"|"changed"}]``.
    diff = models.JSONField(default=list, blank=True)
    created_at = models.BigIntegerField(help_text="Milliseconds since the Unix epoch.")

    class Meta:
        ordering = ("cluster", "version")
        constraints = (
            models.UniqueConstraint(
                fields=["cluster", "version"], name="cluster_config_version_unique"
            ),
        )

    def __str__(self) -> str:
        return f"{self.cluster_id} v{self.version}"


class Message(models.Model):
    """One ledger message (SPEC §1.1). Never edited once stored."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    message_id = models.CharField(max_length=128)
    sequence = models.BigIntegerField()
    timestamp = models.BigIntegerField()
    topic = models.CharField(max_length=64)
    sender = models.CharField(max_length=128)
    receiver = models.CharField(max_length=128, default="broadcast")
    content = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    # The replay policy (SPEC §1.5) depends only on the message, so it is computed once at write
    # time; context selection filters on it inside an index instead of in Python.
    replayable = models.BooleanField(default=True)
    # NULL, not "": the unique constraint on keys must ignore messages without one.
    # ``content.data.event`` when it is a string (AGENT_LIFECYCLE's STARTED, TASK_COMPLETED…),
    # so that "this agent's last TASK_COMPLETED" is one index seek, not a walk over its events.
    event = models.CharField(max_length=64, blank=True, default="", db_default="")
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    body_hash = models.CharField(max_length=64, blank=True, default="")
    # Stored by an import (a zeroshot ledger, an export, demo history): history, not an event,
    # so the pipeline's stages never react to it (SPEC §7.1).
    imported = models.BooleanField(default=False, db_default=False)

    class Meta:
        constraints = (
            models.UniqueConstraint(
                fields=["cluster", "sequence"], name="message_cluster_sequence"
            ),
            models.UniqueConstraint(fields=["cluster", "message_id"], name="message_cluster_id"),
            models.UniqueConstraint(
                fields=["cluster", "idempotency_key"],
                condition=models.Q(idempotency_key__isnull=False),
                name="message_cluster_idempotency",
            ),
        )
        indexes = (
            # Queries (SPEC §1.3) order by (timestamp, sequence) inside one cluster.
            models.Index(fields=["cluster", "timestamp", "sequence"], name="msg_cluster_time"),
            models.Index(
                fields=["cluster", "topic", "timestamp", "sequence"], name="msg_cluster_topic"
            ),
            models.Index(
                fields=["cluster", "sender", "timestamp", "sequence"], name="msg_cluster_sender"
            ),
            # Context sources: one topic (optionally one sender), replayable only, newest or
            # oldest N from a timestamp.
            models.Index(
                fields=["cluster", "topic", "replayable", "timestamp", "sequence"],
                name="msg_context_topic",
            ),
            models.Index(
                fields=["cluster", "topic", "sender", "replayable", "timestamp", "sequence"],
                name="msg_context_topic_sender",
            ),
            models.Index(
                fields=["cluster", "topic", "sender", "event", "timestamp", "sequence"],
                name="msg_lifecycle_event",
            ),
        )

    def __str__(self) -> str:
        return f"{self.cluster_id}#{self.sequence} {self.topic}"


class ApiKey(models.Model):
    """A bearer key for agents; only its SHA-256 is stored."""

    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.CASCADE, related_name="api_keys"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        scope = f" ({self.cluster_id})" if self.cluster_id else ""
        return f"{self.name}{scope}"
