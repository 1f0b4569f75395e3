"""Providers run one task's agent: a shell command, an OpenAI-compatible endpoint, or a script."""

from __future__ import annotations

from zeroshot_runner.providers.base import Job, Provider

__all__ = ["Job", "Provider"]
