"""The topics the server itself publishes or reacts to: one vocabulary, so that "who reacts to
``CLUSTER_FAILED``" is one search (``Topic.CLUSTER_FAILED``).

Tenants publish topics of their own too (any ``TOPIC_PATTERN``); a ``StrEnum`` member compares
equal to its text, so a message's plain ``topic`` string is compared against these directly.
Django-free.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Topic(StrEnum):
    """A topic with a meaning to the server (SPEC §1, §5, §7)."""

    # The work of a cluster, as zeroshot's conductor and agents name it.
    ISSUE_OPENED = "ISSUE_OPENED"
    PLAN_READY = "PLAN_READY"
    IMPLEMENTATION_READY = "IMPLEMENTATION_READY"
    VALIDATION_RESULT = "VALIDATION_RESULT"
    WORKER_PROGRESS = "WORKER_PROGRESS"
    STATE_SNAPSHOT = "STATE_SNAPSHOT"
    CLUSTER_OPERATIONS = "CLUSTER_OPERATIONS"
    # The operator's guidance to one agent (receiver = its id) or to all (SPEC §7.8).
    USER_GUIDANCE_AGENT = "USER_GUIDANCE_AGENT"
    USER_GUIDANCE_CLUSTER = "USER_GUIDANCE_CLUSTER"
    # A cluster's life.
    CLUSTER_COMPLETE = "CLUSTER_COMPLETE"
    CLUSTER_FAILED = "CLUSTER_FAILED"
    CLUSTER_STOPPED = "CLUSTER_STOPPED"
    CLUSTER_RESUMED = "CLUSTER_RESUMED"
    # What a run says about its agents and tasks.
    AGENT_LIFECYCLE = "AGENT_LIFECYCLE"
    AGENT_ERROR = "AGENT_ERROR"
    AGENT_OUTPUT = "AGENT_OUTPUT"
    AGENT_SCHEMA_WARNING = "AGENT_SCHEMA_WARNING"
    TOKEN_USAGE = "TOKEN_USAGE"
    # The post-commit pipeline gave up on a message (docs/decisions/0088).
    PIPELINE_ERROR = "PIPELINE_ERROR"


# After one of these, nothing in the cluster triggers any more.
ENDING_TOPICS: Final = frozenset(
    {Topic.CLUSTER_COMPLETE, Topic.CLUSTER_FAILED, Topic.CLUSTER_STOPPED}
)
