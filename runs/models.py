"""Tasks: one execution of one agent, handed to workers under leases (SPEC §7.3)."""

from __future__ import annotations

from django.db import models


class TaskState(models.TextChoices):
    """A task's states; which moves between them are allowed is ``runs.states.TRANSITIONS``."""

    QUEUED = "queued"
    CLAIMED = "claimed"
    # Its lease ran out with retries left: claimable again, and its agent's turn still.
    EXPIRED = "expired"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    # Never run: its agent's queue of waiting tasks was full. Only tasks from before the trigger
    # buffer (``BufferedTrigger``, docs/decisions/0130) are in it: a full buffer now drops a row.
    DROPPED = "dropped"


# The states a task can still leave (``runs.states.OPEN_STATES`` says the same, from its table).
OPEN_STATES = (TaskState.QUEUED, TaskState.CLAIMED, TaskState.EXPIRED)


class Task(models.Model):
    """One execution of one agent, from its trigger to its completion or failure."""

    id = models.CharField(primary_key=True, max_length=40, help_text="task_ + 32 hex")
    cluster = models.ForeignKey(
        "ledger.Cluster", on_delete=models.CASCADE, related_name="tasks", db_index=False
    )
    agent_id = models.CharField(max_length=64)
    role = models.CharField(max_length=128, blank=True, default="")
    # The agent's ``provider`` when it names one: only a runner serving it may claim the task
    # (a claim's ``providers``); "" is served by any runner (SPEC §7.4).
    provider = models.CharField(max_length=64, blank=True, default="", db_default="")
    iteration = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.QUEUED)
    trigger_message_id = models.CharField(max_length=128)
    trigger_topic = models.CharField(max_length=64)
    trigger_sequence = models.BigIntegerField()
    # Who sent the triggering message: ``TASK_STARTED`` says it as ``triggerFrom`` (SPEC §7.3).
    trigger_sender = models.CharField(max_length=128, blank=True, default="", db_default="")
    build = models.ForeignKey(
        "context.ContextBuild", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    attempts = models.PositiveIntegerField(default=0)
    lease_id = models.CharField(max_length=40, blank=True, default="")
    lease_seconds = models.PositiveIntegerField(default=0)
    lease_expires_at = models.BigIntegerField(null=True, blank=True, help_text="ms")
    worker = models.CharField(max_length=128, blank=True, default="")
    # Output lines stored under the current lease: a batch sent again is recognised by offset.
    output_lines = models.PositiveIntegerField(default=0)
    created_at = models.BigIntegerField(help_text="ms")
    # A retried task waits for its backoff before it can be claimed again.
    available_at = models.BigIntegerField(help_text="ms")
    claimed_at = models.BigIntegerField(null=True, blank=True, help_text="ms")
    finished_at = models.BigIntegerField(null=True, blank=True, help_text="ms")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    usage = models.JSONField(null=True, blank=True)
    # What ``complete`` was called with and what it published: a repeat of the same body returns
    # the same messages, another body is refused (SPEC §7.4).
    completion_hash = models.CharField(max_length=64, blank=True, default="")
    completion_messages = models.JSONField(default=list, blank=True)
    # The sequence of the message that ended this task for its agent's triggers (its
    # ``TASK_COMPLETED`` or final ``AGENT_ERROR``), written by the trigger stage as it offers that
    # message. Until then the agent is busy: its trigger-matching messages are buffered
    # (``BufferedTrigger``), judged when it ends (SPEC §7.1, docs/decisions/0130).
    settled_sequence = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = (
            # Re-running the pipeline over the same messages never queues a task twice.
            models.UniqueConstraint(
                fields=["cluster", "agent_id", "trigger_message_id"], name="task_once_per_trigger"
            ),
        )
        indexes = (
            models.Index(fields=["state", "available_at", "created_at"], name="task_claimable"),
            models.Index(fields=["state", "lease_expires_at"], name="task_lease_expiry"),
            models.Index(
                fields=["cluster", "agent_id", "state", "created_at"], name="task_agent_queue"
            ),
            models.Index(fields=["cluster", "-created_at"], name="task_cluster_recent"),
            # Whether a cluster has open tasks at all: what tells a stalled cluster (SPEC §7.3).
            models.Index(fields=["cluster", "state"], name="task_cluster_state"),
            # The trigger stage's reads stay bounded as a cluster's history grows: an agent's
            # newest iteration is one seek, and only the tasks that hold an agent busy are in
            # the partial index its busy counts read (docs/decisions/0261).
            models.Index(fields=["cluster", "agent_id", "iteration"], name="task_agent_iteration"),
            models.Index(
                fields=["cluster", "agent_id"],
                condition=models.Q(settled_sequence__isnull=True)
                & ~models.Q(state__in=("cancelled", "dropped")),
                name="task_unsettled",
            ),
            # The conductor watchdog's look (runs.watchdog): a seek per running cluster into the
            # few conductor tasks that completed, not a read of every task's history.
            models.Index(
                fields=["cluster", "finished_at"],
                condition=models.Q(role="conductor", state="completed"),
                name="task_conductor_done",
            ),
        )

    def __str__(self) -> str:
        return f"{self.id} {self.agent_id}#{self.iteration} {self.state}"


class BufferedTrigger(models.Model):
    """A trigger-matching message offered to an agent while it was busy, kept before its logic
    ran; judged, oldest first, when the agent's task ends (SPEC §7.1, §7.3; zeroshot's message
    buffer). Written only by the trigger stage, with the pipeline's cursor: a row is deleted when
    judged, and marked ``dropped`` when ``BUFFER_LIMIT`` newer ones waited."""

    cluster = models.ForeignKey(
        "ledger.Cluster", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    agent_id = models.CharField(max_length=64)
    message_id = models.CharField(max_length=128)
    message_sequence = models.BigIntegerField()
    topic = models.CharField(max_length=64)
    buffered_at = models.BigIntegerField(help_text="ms")
    dropped = models.BooleanField(default=False)

    class Meta:
        constraints = (
            models.UniqueConstraint(
                fields=["cluster", "agent_id", "message_id"], name="trigger_buffered_once"
            ),
        )
        indexes = (
            models.Index(
                fields=["cluster", "dropped", "agent_id", "message_sequence"],
                name="trigger_buffer_order",
            ),
        )

    def __str__(self) -> str:
        return f"{self.agent_id} <- {self.topic}#{self.message_sequence}"


class Runner(models.Model):
    """A runner as its claims name it (``worker``), what it serves and what it did (SPEC §7.4).

    Written with the claim, completion and failure it reports, in their transactions: one
    upsert or one counter update each. What it holds now is read from its claimed tasks.
    """

    name = models.CharField(primary_key=True, max_length=128)
    first_seen_at = models.BigIntegerField(help_text="ms")
    last_seen_at = models.BigIntegerField(help_text="ms")
    labels = models.JSONField(default=dict, blank=True)
    providers = models.JSONField(default=list, blank=True)
    claimed = models.PositiveBigIntegerField(default=0)
    completed = models.PositiveBigIntegerField(default=0)
    failed = models.PositiveBigIntegerField(default=0)

    class Meta:
        indexes = (models.Index(fields=["-last_seen_at"], name="runner_last_seen"),)

    def __str__(self) -> str:
        return self.name


class UsageDay(models.Model):
    """What the completed tasks of one agent id on one model billed in one UTC day, over every
    cluster, summed as each completion reports it: the fleet page's tokens and cost per day,
    read without parsing any task's usage (docs/decisions/0141-usage-per-day.md)."""

    day = models.IntegerField(help_text="days since the epoch, UTC")
    agent_id = models.CharField(max_length=64)
    # The model the runner named; "" when it named none.
    model = models.CharField(max_length=200, blank=True, default="")
    tasks = models.PositiveIntegerField(default=0)
    input_tokens = models.BigIntegerField(default=0)
    output_tokens = models.BigIntegerField(default=0)
    # None while no completion of the row reported a cost.
    cost_usd = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = (
            models.UniqueConstraint(fields=["day", "agent_id", "model"], name="usage_day_once"),
        )

    def __str__(self) -> str:
        return f"{self.day} {self.agent_id} {self.model}"
