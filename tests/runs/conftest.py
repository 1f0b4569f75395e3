"""Helpers of the runs tests: a worker that answers tasks from a script, built-in templates."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from context.services.templates import templates_load_builtin
from tests.conftest import ApiClient

Answer = Callable[[dict[str, Any]], dict[str, Any]]


@pytest.fixture
def builtin_templates(db: None) -> None:
    """The built-in templates; a transactional test starts from empty tables."""
    templates_load_builtin()


class ScriptedWorker:
    """Claims tasks through the work API and completes them with scripted answers."""

    def __init__(self, api: ApiClient, answers: dict[str, list[Answer | dict[str, Any]]]) -> None:
        self.api = api
        self.answers = {agent: list(queue) for agent, queue in answers.items()}
        self.claims: list[dict[str, Any]] = []

    def step(self) -> dict[str, Any] | None:
        """Claim one task and complete it; None when there is nothing to do."""
        response = self.api.post("/api/v1/tasks/claim", {"wait": 0, "worker": "test"})
        if response.status_code == 204:
            return None
        assert response.status_code == 200, response.content
        claim = response.json()
        self.claims.append(claim)
        task = claim["task"]
        answer = self.answers[task["agent_id"]].pop(0)
        result = answer(claim) if callable(answer) else answer
        done = self.api.post(
            f"/api/v1/tasks/{task['id']}/complete",
            {
                "lease_id": task["lease_id"],
                "result": result,
                "output": json.dumps(result),
                "usage": {"inputTokens": 1200, "outputTokens": 300, "model": "test-model"},
            },
        )
        assert done.status_code == 200, done.content
        return claim

    def run(self, limit: int = 50) -> list[dict[str, Any]]:
        """Work until no task is left (at most ``limit`` tasks)."""
        for _ in range(limit):
            if self.step() is None:
                break
        return self.claims
