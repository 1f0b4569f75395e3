"""Trigger dispatch (SPEC §7.1): the pipeline stage that turns messages into tasks.

Each published message of a ``running`` cluster is offered, after the snapshotter has seen it,
to every agent of the cluster's config in config order. The agent's first trigger whose topic
matches decides: while the agent is busy (a task of it has not ended) the message waits in its
buffer, before any logic runs; otherwise the trigger's ``logic`` says whether it acts —
``execute_task`` queues a task, ``stop_cluster`` publishes ``CLUSTER_COMPLETE``. The message
that ends an agent's task makes it idle and its buffer is judged then, oldest first. Scripts run
while the pipeline plans, outside any write transaction; the tasks, messages and buffer rows
they lead to are written with the pipeline's cursor, so each message's reactions are committed
exactly once (docs/decisions/0130-trigger-buffer-before-logic.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db import transaction

from context.agents import AgentConfigError, AgentSpec, Trigger
from context.completion import running_agents
from ledger import interfaces as ledger
from ledger.interfaces import (
    ENDING_TOPICS,
    JSON,
    Batch,
    ClusterRecord,
    ClusterState,
    ClusterWriter,
    MessageDraft,
    MessageRecord,
    Topic,
)
from runs import lifecycle, operations
from runs.logic import (
    DEFAULT_STOP_REASON,
    AgentInfo,
    ClusterInfo,
    LedgerView,
    LogicError,
    trigger_logic_evaluate,
)
from runs.models import Task
from runs.script_view import script_view_read
from runs.services.queue import (
    AgentTurns,
    Buffered,
    BufferWrites,
    TriggerRef,
    agent_turns,
    buffer_pop,
    buffer_push,
    task_queue,
    tasks_cancel,
)
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
    message: TriggerRef


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
    buffers: BufferWrites = field(default_factory=BufferWrites)
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
        running = not self.ends and writer.state == ClusterState.RUNNING
        self.buffers.apply(cluster_id=writer.cluster_id, running=running)
        if not running:
            tasks_cancel(cluster_id=writer.cluster_id, reason="the cluster is no longer running")
        if queued:
            transaction.on_commit(tasks_changed.notify)


@dataclass
class _Offering:
    """What one batch's offers share: the cluster, the view, each agent's turn, the writes."""

    info: ClusterInfo
    view: LedgerView
    turns: AgentTurns
    writes: DispatchWrites


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

    def reacts_to(self, cluster: ClusterRecord) -> frozenset[str] | None:
        """A cluster without agents has nothing to trigger; one with agents offers every message
        to its scripts' view (the pipeline's ``Selective``)."""
        return None if cluster.agents else frozenset()

    def plan(self, batch: Batch) -> DispatchWrites | None:
        """Offer each published message of the batch to the cluster's agents.

        An agent busy with a task keeps the messages its triggers match in its buffer; the
        message that ends its task (``TASK_COMPLETED``, its final ``AGENT_ERROR``) makes it idle,
        and its buffer is judged then, oldest first, against the ledger as of that message
        (zeroshot's ``agent-lifecycle.js`` ``handleMessage`` and ``message-buffer.ts``).
        """
        if not batch.cluster.agents:
            return None
        writes = DispatchWrites()
        running = batch.cluster.state == ClusterState.RUNNING
        config, version = batch.cluster.config, batch.cluster.config_version
        try:
            # zeroshot's completion-detector joins a config without a completion handler.
            agents = running_agents(config, text=batch.cluster.config_text)
        except AgentConfigError as error:
            # Only a config stored before configs were parsed at creation can get here.
            return _config_refused(writes, error) if running else None
        index = trigger_index(agents)
        info = index.info(batch.cluster.id)
        view = self._view(batch)
        live = {m.sequence for m in batch.live}
        offering: _Offering | None = None

        def concerns(message: MessageRecord) -> bool:
            return index.concerns(message.topic) or _may_end_task(message)

        for message in batch.messages:
            view.append(message.to_wire())
            if message.sequence not in live:
                continue
            if message.topic in ENDING_TOPICS:
                running = False
                writes.ends = True
            if not running or not offered(message):
                continue
            if not concerns(message):
                continue  # no trigger of any agent, no task's end, no operations: no turn
            if offering is None:
                # Read once per batch, and only when a message is offered.
                offering = _Offering(
                    info=info, view=view, turns=agent_turns(cluster_id=info.id), writes=writes
                )
            idle_again = _settle(message, offering)
            for agent, trigger in index.matching(message.topic):
                if self._offer(agent, trigger, message=message, offering=offering):
                    running = False  # stop_cluster: nothing triggers after it
                    break
            for agent in agents:
                if not running:
                    break
                if agent.id in idle_again and self._drain(agent, offering):
                    running = False  # a buffered message stopped the cluster
            if running and message.topic == operations.CLUSTER_OPERATIONS:
                outcome = operations.operations_plan(
                    message, config=config, template=batch.cluster.template, version=version
                )
                if outcome is not None and outcome.config is not None:
                    changed = running_agents(outcome.config)
                    writes.steps.append(ConfigChange(outcome.config, message, outcome.diff))
                    # Agents that join trigger on what comes after this message only.
                    config, agents = outcome.config, changed
                    index = trigger_index(agents)
                    version += 1
                    info = index.info(batch.cluster.id)
                    offering.info = info
                if outcome is not None:
                    writes.steps.extend(outcome.drafts)
                    running = running and not outcome.fails_cluster
        self._keep(batch.cluster.id, view, batch.upto)
        return writes if writes.steps or writes.ends or writes.buffers else None

    def _offer(
        self, agent: AgentSpec, trigger: Trigger, *, message: MessageRecord, offering: _Offering
    ) -> bool:
        """Offer a message to an agent whose ``trigger`` (its first) matches it: kept in its
        buffer while it is busy, else judged now. True when the agent stopped the cluster."""
        turns = offering.turns
        if turns.busy(agent.id):
            entry = Buffered(
                agent_id=agent.id, id=message.id, topic=message.topic, sequence=message.sequence
            )
            buffer_push(turns, offering.writes.buffers, entry)
            return False
        return self._judge(agent, message=message, offering=offering, trigger=trigger)

    def _drain(self, agent: AgentSpec, offering: _Offering) -> bool:
        """Judge the agent's buffered messages, oldest first, while it stays idle (zeroshot's
        ``drainBufferedMessages``). True when the agent stopped the cluster."""
        turns = offering.turns
        while not turns.busy(agent.id):
            entry = buffer_pop(turns, offering.writes.buffers, agent.id)
            if entry is None:
                return False
            message = _buffered_message(entry, offering)
            if message is not None and self._judge(agent, message=message, offering=offering):
                return True
        return False

    def _judge(
        self,
        agent: AgentSpec,
        *,
        message: MessageRecord,
        offering: _Offering,
        trigger: Trigger | None = None,
    ) -> bool:
        """Run the first trigger whose topic matches (``trigger`` when the caller found it): its
        logic (none: true) decides whether the agent acts; later triggers are not tried
        (zeroshot's ``findMatchingTrigger``). True when the agent stopped the cluster."""
        if trigger is None:
            trigger = _trigger_for(agent, message.topic)
        if trigger is None:
            return False
        writes, turns = offering.writes, offering.turns
        if trigger.logic is not None:
            outcome = trigger_logic_evaluate(
                trigger.logic.source,
                message=message.to_wire(),
                view=offering.view,
                cluster=offering.info,
                agent=AgentInfo(id=agent.id, role=agent.role, iteration=turns.iteration(agent.id)),
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
                return False  # a script that fails counts as false
            if not outcome.passed:
                return False
        if trigger.action == "stop_cluster":
            # zeroshot's executeTriggerAction (src/agent/agent-lifecycle.js): its fixed reason.
            writes.steps.append(_complete(sender=agent.id, reason=DEFAULT_STOP_REASON))
            return True
        writes.steps.append(QueueTask(agent=agent, message=message))
        turns.queued(agent.id)
        return False

    def _view(self, batch: Batch) -> LedgerView:
        """The cluster as of the batch's start: kept from the last batch, else read again."""
        with self._lock:
            # Taken out while a batch extends it: a plan that fails leaves no half-run view.
            kept = self._views.pop(batch.cluster.id, None)
        if kept is not None and kept[1] == batch.after:
            return kept[0]
        return script_view_read(cluster_id=batch.cluster.id, up_to_sequence=batch.after)

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


class TriggerIndex:
    """The agents of one parsed config, and what the trigger stage asks of them for every
    batch: per topic, each agent's first trigger that matches it, in config order; per cluster,
    the ``ClusterInfo`` its scripts see (its agents serialised once). Kept per agents tuple
    (``trigger_index``): ``running_agents`` hands out the same tuple for the same config text,
    so a config is indexed once, and a changed config is a new tuple, indexed anew."""

    __slots__ = ("_by_topic", "_infos", "agents")

    def __init__(self, agents: tuple[AgentSpec, ...]) -> None:
        self.agents = agents
        self._by_topic: dict[str, tuple[tuple[AgentSpec, Trigger], ...]] = {}
        self._infos: dict[str, ClusterInfo] = {}

    def matching(self, topic: str) -> tuple[tuple[AgentSpec, Trigger], ...]:
        """(agent, its first trigger matching ``topic``) of the agents with one, in order."""
        found = self._by_topic.get(topic)
        if found is None:
            found = tuple(
                (agent, trigger)
                for agent in self.agents
                if (trigger := _trigger_for(agent, topic)) is not None
            )
            if len(self._by_topic) >= _INDEX_TOPICS:
                self._by_topic.clear()
            self._by_topic[topic] = found
        return found

    def concerns(self, topic: str) -> bool:
        """Whether the trigger stage has anything to do with messages of ``topic`` besides the
        end of a task (``_may_end_task``): an agent's trigger matches it, or it is
        ``CLUSTER_OPERATIONS``. A message of neither that ends no task (a ``TASK_STARTED``, an
        agent's output) needs no agent's turn read."""
        return topic == operations.CLUSTER_OPERATIONS or bool(self.matching(topic))

    def info(self, cluster_id: str) -> ClusterInfo:
        """The cluster as its trigger scripts see it (immutable, shared by batches)."""
        info = self._infos.get(cluster_id)
        if info is None:
            info = ClusterInfo(id=cluster_id, agents=tuple(a.raw for a in self.agents))
            if len(self._infos) >= _VIEW_MEMO_LIMIT:
                self._infos.clear()
            self._infos[cluster_id] = info
        return info


_INDEX_TOPICS = 1024  # topics indexed per config before the index starts over
_INDEXES_KEPT = 64  # as many as ``running_agents`` keeps parsed configs
_indexes: dict[int, TriggerIndex] = {}


def trigger_index(agents: tuple[AgentSpec, ...]) -> TriggerIndex:
    """The index of ``agents``, kept per tuple (by identity: the index holds the tuple, so its
    id is not reused while kept)."""
    index = _indexes.get(id(agents))
    if index is None or index.agents is not agents:
        index = TriggerIndex(agents)
        if len(_indexes) >= _INDEXES_KEPT:
            _indexes.clear()
        _indexes[id(agents)] = index
    return index


def _trigger_for(agent: AgentSpec, topic: str) -> Trigger | None:
    """The agent's first trigger whose topic matches: the one that decides (SPEC §7.1)."""
    return next((t for t in agent.triggers if t.matches(topic)), None)


def _settle(message: MessageRecord, offering: _Offering) -> set[str]:
    """The agents whose task this message ends (its ``TASK_COMPLETED`` or final
    ``AGENT_ERROR``, sent by the agent with the task's id): idle from it on."""
    if not _may_end_task(message):
        return set()
    task_id = str(message.data["taskId"])
    if not offering.turns.settle(message.sender, task_id):
        return set()
    offering.writes.buffers.settled[task_id] = message.sequence
    return set() if offering.turns.busy(message.sender) else {message.sender}


def _may_end_task(message: MessageRecord) -> bool:
    """A ``TASK_COMPLETED`` or an ``AGENT_ERROR`` that names a task (``_settle`` checks that it
    is one of its sender's open tasks)."""
    data = message.data
    if not isinstance(data, Mapping) or not isinstance(data.get("taskId"), str):
        return False
    return message.topic == lifecycle.AGENT_ERROR or (
        message.topic == lifecycle.LIFECYCLE and data.get("event") == "TASK_COMPLETED"
    )


def _buffered_message(entry: Buffered, offering: _Offering) -> MessageRecord | None:
    """A buffered message as it was published: from the view, else from the ledger."""
    wire = offering.view.get(entry.sequence)
    if wire is not None and wire.get("id") == entry.id:
        return MessageRecord.from_wire(wire)
    try:
        return ledger.message_get(cluster_id=offering.info.id, message_id=entry.id)
    except ledger.NotFound:
        return None


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
