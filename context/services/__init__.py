"""Writes of the context engine: recorded builds and cluster templates (the thin edges around
the pure core).

Layout: ``builds`` (a build against the ledger, recorded or a preview), ``triggers`` (its
as-of point and triggering message) and ``templates`` (templates with versions, and clusters
made from them).
"""

from __future__ import annotations

from context.services.builds import (
    BuildOutcome,
    RecordHook,
    agent_config_get,
    agent_config_resolve,
    agent_spec_get,
    build_guidance_delivered,
    build_usage_record,
    context_build,
    included_pack_texts,
)
from context.services.triggers import agent_trigger_topics

__all__ = [
    "BuildOutcome",
    "RecordHook",
    "agent_config_get",
    "agent_config_resolve",
    "agent_spec_get",
    "agent_trigger_topics",
    "build_guidance_delivered",
    "build_usage_record",
    "context_build",
    "included_pack_texts",
]
