"""Trigger dispatch (SPEC §7.1): the pipeline stage that turns messages into tasks.

Each published message of a ``running`` cluster is offered, after the snapshotter has seen it,
to every agent of the cluster's config in config order. An agent's triggers are tried in order;
the first whose topic matches and whose ``logic`` passes decides: ``execute_task`` queues a task
for the agent, ``stop_cluster`` publishes ``CLUSTER_COMPLETE``. Scripts run while the pipeline
plans, outside any write transaction; the tasks and messages they lead to are written with the
pipeline's cursor, so each message's reactions are committed exactly once.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db import transaction

from context.agents import AgentConfigError, AgentSpec, config_agents
from context.completion import config_with_completion
from ledger import interfaces as ledger
from ledger.interfaces import (
    ENDING_TOPICS,
    JSON,
    Batch,
    ClusterState,
    ClusterWriter,
    MessageDraft,
    MessageRecord,
    Topic,
)
from runs import lifecycle, operations
from runs.logic import (
    DEFAULT_STOP_REASON,
    VIEW_MAX_MESSAGES,
    AgentInfo,
    ClusterInfo,
    LedgerView,
    LogicError,
    trigger_logic_evaluate,
)
from runs.models import Task
from runs.services.queue import task_queue, tasks_cancel
from runs.signals import tasks_changed
from runs.states import TaskEvent, tasks_move

logger = logging.getLogger(__name__)

# After the snapshotter (10): agents are offered a message once the snapshot holds it.
STAGE_ORDER = 20
VALIDATOR_ROLE = "validator"
# A stop_cluster reason is a short word or sentence; a longer one is cut (SPEC §7.1).
STOP_REASON_MAX = 2_000
_VIEW_MEMO_LIMIT = 1000


@dataclass(frozen=True, slots=True)
class QueueTask:
    """Queue a task for an agent, triggered by a message."""

    agent: AgentSpec
    message: MessageRecord


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """A successful ``CLUSTER_OPERATIONS`` chain: the cluster's next config version (§7.7)."""

    config: dict[str, JSON]
    message: MessageRecord
    diff: list[JSON]

    def apply(self, writer: ClusterWriter) -> None:
        ledger.cluster_config_change(
            writer,
            config=self.config,
            sender=self.message.sender,
            message_id=self.message.id,
            diff=self.diff,
            now=ledger.now_ms(),
        )
        # zeroshot stops a removed or replaced agent: its open tasks end with it.
        gone = [
            d["agent"]
            for d in self.diff
            if isinstance(d, Mapping) and d.get("change") in ("removed", "replaced")
        ]
        if gone:
            tasks_move(
                Task.objects.filter(cluster_id=writer.cluster_id, agent_id__in=gone),
                TaskEvent.CANCEL,
                now=ledger.now_ms(),
                error="its agent was removed or replaced by CLUSTER_OPERATIONS",
            )


@dataclass
class DispatchWrites:
    """What a batch's messages lead to, in the order they led to it."""

    steps: list[QueueTask | MessageDraft | ConfigChange] = field(default_factory=list)
    ends: bool = False

    def apply(self, writer: ClusterWriter) -> None:
        queued = 0
        for step in self.steps:
            if isinstance(step, QueueTask):
                if writer.state == ClusterState.RUNNING:
                    queued += task_queue(writer=writer, agent=step.agent, message=step.message)
            elif isinstance(step, ConfigChange):
                if writer.state == ClusterState.RUNNING:
                    step.apply(writer)
            else:
                writer.append([step], now=ledger.now_ms())
        if self.ends or writer.state != ClusterState.RUNNING:
            tasks_cancel(cluster_id=writer.cluster_id, reason="the cluster is no longer running")
        if queued:
            transaction.on_commit(tasks_changed.notify)


class Dispatcher:
    """The trigger stage; keeps, per cluster, the view of the ledger that scripts read."""

    name = "triggers"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # cluster id -> (the view, the sequence up to which it has seen the cluster)
        self._views: dict[str, tuple[LedgerView, int]] = {}

    def connect(self) -> None:
        """Join the ledger's pipeline, after the snapshotter."""
        ledger.pipeline.register(self, order=STAGE_ORDER)

    def disconnect(self) -> None:
        ledger.pipeline.unregister(self)

    def plan(self, batch: Batch) -> DispatchWrites | None:
        """Offer each published message of the batch to the cluster's agents."""
        if not batch.cluster.agents:
            return None
        writes = DispatchWrites()
        running = batch.cluster.state == ClusterState.RUNNING
        config, version = batch.cluster.config, batch.cluster.config_version
        try:
            # zeroshot's completion-detector joins a config without a completion handler.
            agents = config_agents(config_with_completion(config))
        except AgentConfigError as error:
            # Only a config stored before configs were parsed at creation can get here.
            return _config_refused(writes, error) if running else None
        info = ClusterInfo(id=batch.cluster.id, agents=tuple(a.raw for a in agents))
        view = self._view(batch)
        live = {m.sequence for m in batch.live}
        for message in batch.messages:
            view.append(message.to_wire())
            if message.sequence not in live:
                continue
            if message.topic in ENDING_TOPICS:
                running = False
                writes.ends = True
            if not running or not offered(message):
                continue
            for agent in agents:
                step = self._offer(agent, message=message, view=view, info=info, writes=writes)
                if isinstance(step, MessageDraft):
                    running = False  # stop_cluster: nothing triggers after it
                    break
            if running and message.topic == operations.CLUSTER_OPERATIONS:
                outcome = operations.operations_plan(
                    message, config=config, template=batch.cluster.template, version=version
                )
                if outcome is not None and outcome.config is not None:
                    changed = config_agents(config_with_completion(outcome.config))
                    writes.steps.append(ConfigChange(outcome.config, message, outcome.diff))
                    # Agents that join trigger on what comes after this message only.
                    config, agents = outcome.config, changed
                    version += 1
                    info = ClusterInfo(id=batch.cluster.id, agents=tuple(a.raw for a in agents))
                if outcome is not None:
                    writes.steps.extend(outcome.drafts)
                    running = running and not outcome.fails_cluster
        self._keep(batch.cluster.id, view, batch.upto)
        return writes if writes.steps or writes.ends else None

    def _offer(
        self,
        agent: AgentSpec,
        *,
        message: MessageRecord,
        view: LedgerView,
        info: ClusterInfo,
        writes: DispatchWrites,
    ) -> QueueTask | MessageDraft | None:
        """Try the agent's triggers on a message; the first that matches and passes decides."""
        for trigger in agent.triggers:
            if not trigger.matches(message.topic):
                continue
            if trigger.logic is not None:
                outcome = trigger_logic_evaluate(
                    trigger.logic.source,
                    message=message.to_wire(),
                    view=view,
                    cluster=info,
                    agent=AgentInfo(id=agent.id, role=agent.role),
                )
                if isinstance(outcome, LogicError):
                    writes.steps.append(
                        lifecycle.agent_error_draft(
                            agent_id=agent.id,
                            phase="trigger_logic",
                            error=outcome.message,
                            topic=message.topic,
                            messageId=message.id,
                        )
                    )
                    continue  # a script that fails counts as false
                if not outcome.passed:
                    continue
            step: QueueTask | MessageDraft
            if trigger.action == "stop_cluster":
                # zeroshot's executeTriggerAction (src/agent/agent-lifecycle.js): its fixed reason.
                step = _complete(sender=agent.id, reason=DEFAULT_STOP_REASON)
            else:
                step = QueueTask(agent=agent, message=message)
            writes.steps.append(step)
            return step
        return None

    def _view(self, batch: Batch) -> LedgerView:
        """The cluster as of the batch's start: kept from the last batch, else read again."""
        with self._lock:
            # Taken out while a batch extends it: a plan that fails leaves no half-run view.
            kept = self._views.pop(batch.cluster.id, None)
        if kept is not None and kept[1] == batch.after:
            return kept[0]
        messages = ledger.message_window(
            cluster_id=batch.cluster.id,
            up_to_sequence=batch.after,
            limit=VIEW_MAX_MESSAGES,
            skip_topic=lifecycle.AGENT_OUTPUT,
        )
        return LedgerView(m.to_wire() for m in messages)

    def _keep(self, cluster_id: str, view: LedgerView, upto: int) -> None:
        with self._lock:
            if len(self._views) >= _VIEW_MEMO_LIMIT:
                self._views.clear()
            self._views[cluster_id] = (view, upto)


def offered(message: MessageRecord) -> bool:
    """Whether triggers see a message: not the errors of trigger scripts themselves, which
    would otherwise feed a failing wildcard trigger its own failures forever."""
    data = message.data
    return not (
        message.topic == lifecycle.AGENT_ERROR
        and isinstance(data, Mapping)
        and data.get("phase") == "trigger_logic"
    )


def _complete(*, sender: str, reason: str) -> MessageDraft:
    """``CLUSTER_COMPLETE`` to ``system`` (SPEC §7.1), its reason made storable."""
    reason = ledger.text_storable(reason, max_chars=STOP_REASON_MAX)
    return MessageDraft(
        topic=Topic.CLUSTER_COMPLETE,
        sender=sender,
        receiver="system",
        content={"text": f"Cluster complete: {reason}", "data": {"reason": reason}},
    )


def _config_refused(writes: DispatchWrites, error: AgentConfigError) -> DispatchWrites:
    """A running cluster whose config cannot be read fails, saying why, rather than idling."""
    problem = ledger.text_storable(error.message, max_chars=lifecycle.ERROR_TEXT_MAX)
    writes.steps.append(
        MessageDraft(
            topic=Topic.CLUSTER_FAILED,
            sender="system",
            content={
                "text": f"Cluster failed: its config cannot run: {problem}",
                "data": {"reason": "invalid_config", "error": problem},
            },
        )
    )
    writes.ends = True
    return writes


dispatcher = Dispatcher()
