"""Starting and stopping a cluster's run (SPEC §7.4)."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import transaction

from context.services.templates import cluster_create_from_template
from ledger import interfaces as ledger
from ledger.interfaces import (
    JSON,
    ClusterRecord,
    ClusterState,
    Conflict,
    InvalidInput,
    MessageDraft,
    Topic,
)
from runs.services.queue import tasks_cancel
from runs.signals import tasks_changed

ENDED = {ClusterState.COMPLETED, ClusterState.FAILED, ClusterState.KILLED}
TITLE_MAX = 300
ISSUE_TEXT_MAX = 100_000


def issue_draft(*, title: str, text: str) -> MessageDraft:
    """``ISSUE_OPENED`` from an operator's words, shaped as zeroshot writes a manual input."""
    title = " ".join(title.split())[:TITLE_MAX] or "Manual input"
    body = f"# {title}\n\n{text.strip()}\n"
    return MessageDraft(
        topic=Topic.ISSUE_OPENED,
        sender="system",
        content={"text": body, "data": {"issue_number": None, "title": title}},
        metadata={"source": "text"},
    )


def cluster_start(*, cluster_id: str, issue: Mapping[str, JSON]) -> ClusterRecord:
    """Set the cluster running and publish the issue it is to work on (``ISSUE_OPENED``).

    A cluster that ended cannot start again, nor can one that already has its issue.
    """
    draft = _issue_checked(issue)
    existing = ledger.message_latest(cluster_id=cluster_id, topics=[Topic.ISSUE_OPENED])
    with ledger.cluster_transaction(cluster_id) as writer:
        if writer.state in ENDED:
            raise Conflict(
                f"cluster {cluster_id!r} has {writer.state}; create a new cluster to run again",
                details={"state": writer.state},
            )
        if existing is not None:
            raise Conflict(
                f"cluster {cluster_id!r} already has its issue (message {existing.sequence})",
                details={"state": writer.state},
            )
        writer.state_set(ClusterState.RUNNING)
        writer.append([draft], now=ledger.now_ms())
    return ledger.cluster_get(cluster_id=cluster_id)


def _issue_checked(issue: Mapping[str, JSON]) -> MessageDraft:
    title, text = issue.get("title") or "", issue.get("text")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("the issue needs a text", details={"field": "issue.text"})
    if not isinstance(title, str):
        raise InvalidInput("issue.title must be a string", details={"field": "issue.title"})
    if len(text) > ISSUE_TEXT_MAX:
        raise InvalidInput(
            f"the issue text is longer than {ISSUE_TEXT_MAX:,} characters",
            details={"field": "issue.text"},
        )
    draft = issue_draft(title=title, text=text)
    ledger.drafts_check([draft], single=True)
    return draft


def cluster_stop(*, cluster_id: str, reason: str = "stopped by an operator") -> ClusterRecord:
    """Stop a cluster: ``CLUSTER_STOPPED``, open tasks cancelled, nothing triggers any more."""
    with ledger.cluster_transaction(cluster_id) as writer:
        if writer.state in ENDED or writer.state == ClusterState.STOPPED:
            raise Conflict(
                f"cluster {cluster_id!r} is not running (it is {writer.state})",
                details={"state": writer.state},
            )
        writer.state_set(ClusterState.STOPPED)
        writer.append(
            [
                MessageDraft(
                    topic=Topic.CLUSTER_STOPPED,
                    sender="system",
                    content={"text": f"Cluster stopped: {reason}", "data": {"reason": reason}},
                )
            ],
            now=ledger.now_ms(),
        )
        tasks_cancel(cluster_id=cluster_id, reason=reason)
        transaction.on_commit(tasks_changed.notify)
    return ledger.cluster_get(cluster_id=cluster_id)


def cluster_launch(
    *,
    template_name: str,
    issue: Mapping[str, JSON],
    params: Mapping[str, JSON] | None = None,
    labels: Mapping[str, str] | None = None,
) -> ClusterRecord:
    """Create a cluster from a template, with ``labels`` (its runner pool), and start it with
    an issue (the dashboard's *Start*)."""
    _issue_checked(issue)
    created = cluster_create_from_template(
        template_name=template_name, params=params, cluster_id=None, labels=labels
    )
    return cluster_start(cluster_id=created.id, issue=issue)
