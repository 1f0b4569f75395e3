"""Realistic demo clusters, written in our own words, for a newcomer's first look."""

from __future__ import annotations

from typing import Any

WORKER_VALIDATOR_AGENTS: list[dict[str, Any]] = [
    {
        "id": "worker",
        "role": "implementation",
        "prompt": "Implement the issue in small, tested steps. Report progress as you go.",
        "triggers": [
            {"topic": "ISSUE_OPENED", "action": "execute_task"},
            {"topic": "VALIDATION_RESULT", "action": "execute_task"},
        ],
        "hooks": {
            "onComplete": {"action": "publish_message", "config": {"topic": "IMPLEMENTATION_READY"}}
        },
        "contextStrategy": {
            "maxTokens": 650,
            "sources": [
                {"topic": "ISSUE_OPENED", "priority": "required"},
                {"topic": "STATE_SNAPSHOT", "amount": 1, "priority": "required"},
                {"topic": "VALIDATION_RESULT", "since": "last_task_end", "priority": "high"},
                {"topic": "WORKER_PROGRESS", "amount": 3, "priority": "low"},
            ],
        },
    },
    {
        "id": "validator",
        "role": "validator",
        "prompt": "Check the implementation against every acceptance criterion. Run the tests.",
        "triggers": [{"topic": "IMPLEMENTATION_READY", "action": "execute_task"}],
        "hooks": {
            "onComplete": {"action": "publish_message", "config": {"topic": "VALIDATION_RESULT"}}
        },
        "jsonSchema": {
            "type": "object",
            "properties": {
                "approved": {"type": "boolean"},
                "summary": {"type": "string"},
                "errors": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["approved", "summary"],
        },
        "contextStrategy": {
            "maxTokens": 750,
            "sources": [
                {"topic": "ISSUE_OPENED", "priority": "required"},
                {"topic": "IMPLEMENTATION_READY", "amount": 1, "priority": "required"},
                {"topic": "WORKER_PROGRESS", "amount": 2, "priority": "medium"},
                {"topic": "VALIDATION_RESULT", "amount": 3, "priority": "low"},
            ],
        },
    },
]

PLANNER: dict[str, Any] = {
    "id": "planner",
    "role": "planning",
    "prompt": "Turn the issue into a plan with acceptance criteria and the files it touches.",
    "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    "hooks": {"onComplete": {"action": "publish_message", "config": {"topic": "PLAN_READY"}}},
    "contextStrategy": {"sources": [{"topic": "ISSUE_OPENED", "priority": "required"}]},
}

INVESTIGATOR: dict[str, Any] = {
    "id": "investigator",
    "role": "investigation",
    "prompt": "Find the root cause of the failure before anyone changes code.",
    "triggers": [{"topic": "ISSUE_OPENED", "action": "execute_task"}],
    "hooks": {
        "onComplete": {"action": "publish_message", "config": {"topic": "INVESTIGATION_COMPLETE"}}
    },
    "contextStrategy": {"sources": [{"topic": "ISSUE_OPENED", "priority": "required"}]},
}


def lifecycle(agent: str, event: str) -> dict[str, Any]:
    return {
        "topic": "AGENT_LIFECYCLE",
        "sender": agent,
        "receiver": "system",
        "content": {"text": f"{agent}: {event}", "data": {"event": event, "agent": agent}},
    }


def msg(topic: str, sender: str, text: str, data: Any = None, **extra: Any) -> dict[str, Any]:
    content: dict[str, Any] = {"text": text}
    if data is not None:
        content["data"] = data
    return {"topic": topic, "sender": sender, "receiver": "broadcast", "content": content, **extra}


def _long_run() -> list[dict[str, Any]]:
    """A worker and a validator going round six times: the metrics page's richest demo.

    Each rejection adds to the state snapshot, which the worker must read in full (a required
    source): its prompt grows round after round until it no longer fits its budget.
    """
    rounds = [
        ("Parse the webhook payload into typed events.", "Unknown event types crash the handler"),
        ("Unknown events are logged and acknowledged.", "Retries are not idempotent"),
        (
            "Deliveries are keyed by their id; retries are no-ops.",
            "Signature check accepts stale requests",
        ),
        (
            "Signatures older than five minutes are refused.",
            "Clock skew tolerance is not configurable",
        ),
        (
            "Skew tolerance comes from settings, default 30 s.",
            "The 400 response leaks the secret's length",
        ),
        ("Refusals answer 400 with a fixed body.", ""),
    ]
    errors: list[str] = []
    messages: list[dict[str, Any]] = [
        msg(
            "ISSUE_OPENED",
            "system",
            "# Verify and process payment-provider webhooks\n\nThe provider calls "
            "POST /hooks/payments with a signed JSON body. We must check the signature "
            "(HMAC-SHA256 over timestamp and body), refuse stale or replayed deliveries, "
            "process each event exactly once, and answer within two seconds even when the "
            "ledger is slow. Unknown event types must not crash the handler.",
            {"title": "Verify and process payment webhooks", "issue_number": 958},
        )
    ]
    for i, (work, rejection) in enumerate(rounds, start=1):
        messages += [
            lifecycle("worker", "STARTED"),
            msg(
                "WORKER_PROGRESS",
                "worker",
                work,
                {
                    "completionStatus": {
                        "canValidate": True,
                        "percentComplete": min(100, 40 + 12 * i),
                        "nextSteps": ["Address the validator's findings", "Extend the tests"],
                    }
                },
            ),
            msg("IMPLEMENTATION_READY", "worker", f"Round {i}: {work}"),
            lifecycle("worker", "TASK_COMPLETED"),
            lifecycle("validator", "STARTED"),
        ]
        if rejection:
            errors.append(rejection)
        messages += [
            msg(
                "VALIDATION_RESULT",
                "validator",
                f"Rejected: {rejection}." if rejection else "Approved: every criterion passes.",
                {
                    "approved": not rejection,
                    "errors": list(errors[-5:]) if rejection else [],
                    "criteriaResults": [
                        {
                            "id": f"AC{n}",
                            "status": "FAIL" if rejection and n == len(errors) else "PASS",
                            "reason": text,
                        }
                        for n, text in enumerate(errors, start=1)
                    ],
                },
            ),
            lifecycle("validator", "TASK_COMPLETED"),
        ]
    return messages


CLUSTERS: list[dict[str, Any]] = [
    {
        "id": "amber-comet-7",
        "template": "worker-validator",
        "state": "completed",
        "minutes_ago": 95,
        "agents": WORKER_VALIDATOR_AGENTS,
        "messages": [
            msg(
                "ISSUE_OPENED",
                "system",
                "# Rate-limit the login endpoint\n\nRepeated failed logins "
                "from one address should be slowed down: at most 5 attempts a minute, "
                "then HTTP 429 with a Retry-After header.",
                {"title": "Rate-limit the login endpoint", "issue_number": 412},
                metadata={"source": "github"},
            ),
            lifecycle("worker", "STARTED"),
            msg(
                "WORKER_PROGRESS",
                "worker",
                "Added a sliding-window counter keyed by client address.",
                {
                    "completionStatus": {
                        "canValidate": False,
                        "percentComplete": 40,
                        "nextSteps": ["Return 429 with Retry-After", "Write tests"],
                    }
                },
            ),
            msg("AGENT_OUTPUT", "worker", "$ pytest -q\n12 passed in 0.84s", {"stream": "stdout"}),
            msg(
                "WORKER_PROGRESS",
                "worker",
                "Login view now answers 429 after the fifth attempt.",
                {
                    "completionStatus": {
                        "canValidate": True,
                        "percentComplete": 90,
                        "nextSteps": ["Write tests"],
                    }
                },
            ),
            msg(
                "IMPLEMENTATION_READY",
                "worker",
                "Rate limiting is in place: middleware plus tests.",
                {"filesChanged": ["auth/limits.py", "auth/views.py", "tests/test_limits.py"]},
            ),
            lifecycle("worker", "TASK_COMPLETED"),
            lifecycle("validator", "STARTED"),
            msg(
                "VALIDATION_RESULT",
                "validator",
                "The limit works, but Retry-After is missing.",
                {
                    "approved": False,
                    "errors": ["No Retry-After header on 429 responses"],
                    "criteriaResults": [
                        {"id": "AC1", "status": "PASS", "reason": "Sixth attempt gets 429"},
                        {"id": "AC2", "status": "FAIL", "reason": "Retry-After header absent"},
                        {
                            "id": "AC3",
                            "status": "CANNOT_VALIDATE",
                            "reason": "Load test needs a staging environment",
                        },
                    ],
                },
            ),
            lifecycle("validator", "TASK_COMPLETED"),
            msg(
                "WORKER_PROGRESS",
                "worker",
                "Added Retry-After with the seconds left in the window.",
                {
                    "completionStatus": {
                        "canValidate": True,
                        "percentComplete": 100,
                        "nextSteps": [],
                    }
                },
            ),
            msg(
                "IMPLEMENTATION_READY",
                "worker",
                "Retry-After is now set on every 429.",
                {"filesChanged": ["auth/views.py", "tests/test_limits.py"]},
            ),
            lifecycle("worker", "TASK_COMPLETED"),
            msg(
                "VALIDATION_RESULT",
                "validator",
                "All criteria that can be checked here pass.",
                {
                    "approved": True,
                    "errors": [],
                    "criteriaResults": [
                        {"id": "AC1", "status": "PASS", "reason": "Sixth attempt gets 429"},
                        {"id": "AC2", "status": "PASS", "reason": "Retry-After: 42"},
                        {
                            "id": "AC3",
                            "status": "CANNOT_VALIDATE",
                            "reason": "Load test needs a staging environment",
                        },
                    ],
                },
            ),
            lifecycle("validator", "TASK_COMPLETED"),
            msg("CLUSTER_COMPLETE", "system", "Validators approved the implementation."),
        ],
    },
    {
        "id": "quiet-harbor-21",
        "template": "planner-worker-validators",
        "state": "running",
        "minutes_ago": 12,
        "agents": [PLANNER, *WORKER_VALIDATOR_AGENTS],
        "messages": [
            msg(
                "ISSUE_OPENED",
                "system",
                "# Export invoices as CSV\n\nAccountants want a CSV export of "
                "the invoices list, with the filters they already use.",
                {"title": "Export invoices as CSV", "issue_number": 87},
            ),
            lifecycle("planner", "STARTED"),
            msg(
                "PLAN_READY",
                "planner",
                "Add a CSV renderer to the invoices list view, reuse its "
                "filter form, stream rows so that large exports stay flat in memory.",
                {
                    "summary": "Streamed CSV export reusing the list filters",
                    "acceptanceCriteria": [
                        {
                            "id": "AC1",
                            "priority": "MUST",
                            "criterion": "Export honours the active filters",
                        },
                        {"id": "AC2", "priority": "MUST", "criterion": "Amounts keep two decimals"},
                        {
                            "id": "AC3",
                            "priority": "SHOULD",
                            "criterion": "10k rows export in under 2 s",
                        },
                    ],
                    "filesAffected": [
                        "invoices/views.py",
                        "invoices/export.py",
                        "tests/test_export.py",
                    ],
                },
            ),
            lifecycle("planner", "TASK_COMPLETED"),
            lifecycle("worker", "STARTED"),
            msg(
                "WORKER_PROGRESS",
                "worker",
                "CSV writer streams rows; filters are wired.",
                {
                    "completionStatus": {
                        "canValidate": False,
                        "percentComplete": 45,
                        "nextSteps": ["Format amounts", "Write tests"],
                        "blockers": [],
                    }
                },
            ),
        ],
    },
    {
        "id": "bold-ridge-3",
        "template": "debug-workflow",
        "state": "failed",
        "minutes_ago": 240,
        "agents": [INVESTIGATOR, *WORKER_VALIDATOR_AGENTS],
        "messages": [
            msg(
                "ISSUE_OPENED",
                "system",
                "# Nightly sync crashes with KeyError 'currency'\n\n"
                "Since Tuesday the nightly sync stops half way.",
                {"title": "Nightly sync crashes"},
            ),
            lifecycle("investigator", "STARTED"),
            msg(
                "INVESTIGATION_COMPLETE",
                "investigator",
                "Default the currency to the account's "
                "currency when a supplier omits it, and log the supplier id.",
                {
                    "rootCauses": ["Supplier feed v3 dropped the currency field"],
                    "successCriteria": "The nightly sync completes on the recorded Tuesday feed",
                },
            ),
            lifecycle("investigator", "TASK_COMPLETED"),
            msg(
                "WORKER_PROGRESS",
                "worker",
                "Applied the default; replaying the Tuesday feed.",
                {
                    "completionStatus": {
                        "canValidate": True,
                        "percentComplete": 80,
                        "nextSteps": ["Replay feed"],
                    }
                },
            ),
            msg("IMPLEMENTATION_READY", "worker", "Currency defaults to the account's."),
            msg(
                "VALIDATION_RESULT",
                "validator",
                "The replay still fails on a second missing field.",
                {"approved": False, "errors": ["KeyError 'vat_rate' on line 4411 of the feed"]},
            ),
            msg("CLUSTER_FAILED", "system", "Stopped after the validator found a second defect."),
        ],
    },
    {
        "id": "steady-lantern-12",
        "template": "worker-validator",
        # Its validator approved the sixth round: a live run's completion rule ends it there.
        "state": "completed",
        "minutes_ago": 360,
        "agents": WORKER_VALIDATOR_AGENTS,
        "messages": [
            *_long_run(),
            msg(
                "CLUSTER_COMPLETE",
                "system",
                "Cluster complete: all_validators_approved",
                {"reason": "all_validators_approved"},
            ),
        ],
    },
]
