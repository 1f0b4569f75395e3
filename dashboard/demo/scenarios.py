"""What the demo clusters are: a template, its params, an issue, and the agents' answers.

Nothing here is a message: ``recording.demo_record`` starts each cluster from its template and
answers its tasks through the real claim and complete path, and the ledger that comes out of it
is what the demo shows (``recorded.json``). Answers are written in our own words; each matches
its agent's result schema in the template, or the run would fail where the demo should not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One task's answer: the result the agent returns, its output lines, what it billed."""

    result: dict[str, Any]
    output: tuple[str, ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def usage(self) -> dict[str, Any] | None:
        if not self.input_tokens:
            return None
        return {
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "model": "demo-model",
        }


@dataclass(frozen=True)
class Scenario:
    """One demo cluster: how it starts, how its agents answer, when the recording stops."""

    id: str
    template: str
    title: str
    text: str
    minutes_ago: int
    # Each agent's answers, one per task in order; the last one repeats.
    answers: dict[str, tuple[Answer, ...]]
    params: dict[str, Any] = field(default_factory=dict)
    # Stop after this many tasks and leave the next one open (a cluster still running).
    tasks: int | None = None


def progress(summary: str, percent: int, *steps: str, can_validate: bool = True) -> Answer:
    return Answer(
        {
            "summary": summary,
            "completionStatus": {
                "canValidate": can_validate,
                "percentComplete": percent,
                "blockers": [],
                "nextSteps": list(steps),
            },
        },
        output=("Editing the code", "Running the test suite"),
        input_tokens=4_000 + 40 * percent,
        output_tokens=700,
    )


def verdict(summary: str, criteria: list[tuple[str, str, str]], *errors: str) -> Answer:
    return Answer(
        {
            "approved": not errors,
            "summary": summary,
            "errors": list(errors),
            # zeroshot's completion-detector asks each PASS for the command that showed it.
            "criteriaResults": [
                {
                    "id": cid,
                    "status": status,
                    "reason": reason,
                    "evidence": {
                        "command": f"pytest -k {cid.lower()}",
                        "exitCode": 0 if status == "PASS" else 1,
                        "output": "1 passed" if status == "PASS" else "1 failed",
                    },
                }
                for cid, status, reason in criteria
            ],
        },
        output=("Checking each acceptance criterion", "Running the tests"),
        input_tokens=3_900,
        output_tokens=350,
    )


def _long_run() -> dict[str, tuple[Answer, ...]]:
    """A worker and a validator going round six times: the metrics page's richest demo."""
    rounds = [
        ("Parse the webhook payload into typed events.", "Unknown event types crash the handler"),
        ("Unknown events are logged and acknowledged.", "Retries are not idempotent"),
        ("Deliveries are keyed by their id; retries are no-ops.", "Stale signatures pass"),
        ("Signatures older than five minutes are refused.", "Clock skew is not configurable"),
        ("Skew tolerance comes from settings, default 30 s.", "The 400 leaks the secret's length"),
        ("Refusals answer 400 with a fixed body.", ""),
    ]
    workers, validators, errors = [], [], []
    for i, (work, rejection) in enumerate(rounds, start=1):
        workers.append(progress(work, min(100, 40 + 12 * i), "Address the validator's findings"))
        if rejection:
            errors.append(rejection)
        criteria = [
            (f"AC{n}", "FAIL" if rejection and n == len(errors) else "PASS", text)
            for n, text in enumerate(errors, start=1)
        ]
        validators.append(
            verdict(f"Rejected: {rejection}." if rejection else "Approved.", criteria, rejection)
            if rejection
            else verdict("Approved: every criterion passes.", criteria)
        )
    return {"worker": tuple(workers), "validator": tuple(validators)}


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        id="amber-comet-7",
        template="worker-validator",
        title="Rate-limit the login endpoint",
        text="Repeated failed logins from one address should be slowed down: at most 5 "
        "attempts a minute, then HTTP 429 with a Retry-After header.",
        minutes_ago=95,
        answers={
            "worker": (
                progress("A sliding-window counter answers 429 after the fifth attempt.", 90),
                progress("Retry-After now carries the seconds left in the window.", 100),
            ),
            "validator": (
                verdict(
                    "The limit works, but Retry-After is missing.",
                    [
                        ("AC1", "PASS", "Sixth attempt gets 429"),
                        ("AC2", "FAIL", "Retry-After header absent"),
                        ("AC3", "CANNOT_VALIDATE", "Load test needs a staging environment"),
                    ],
                    "No Retry-After header on 429 responses",
                ),
                verdict(
                    "All criteria that can be checked here pass.",
                    [
                        ("AC1", "PASS", "Sixth attempt gets 429"),
                        ("AC2", "PASS", "Retry-After: 42"),
                        ("AC3", "CANNOT_VALIDATE", "Load test needs a staging environment"),
                    ],
                ),
            ),
        },
    ),
    Scenario(
        id="quiet-harbor-21",
        template="planner-worker-validators",
        title="Export invoices as CSV",
        text="Accountants want a CSV export of the invoices list, with the filters they "
        "already use.",
        minutes_ago=12,
        # The planner has answered; the worker's task is still open.
        tasks=1,
        answers={
            "planner": (
                Answer(
                    {
                        "plan": "Add a CSV renderer to the invoices list view, reuse its filter "
                        "form, stream rows so that large exports stay flat in memory.",
                        "summary": "Streamed CSV export reusing the list filters",
                        "filesAffected": [
                            "invoices/views.py",
                            "invoices/export.py",
                            "tests/test_export.py",
                        ],
                        "risks": ["Amounts rounded differently from the list"],
                        "acceptanceCriteria": [
                            {
                                "id": "AC1",
                                "priority": "MUST",
                                "criterion": "Export honours the active filters",
                                "verification": "A test exports a filtered list",
                            },
                            {
                                "id": "AC2",
                                "priority": "MUST",
                                "criterion": "Amounts keep two decimals",
                                "verification": "A test reads the amounts back",
                            },
                            {
                                "id": "AC3",
                                "priority": "SHOULD",
                                "criterion": "10k rows export in under 2 s",
                                "verification": "A timed test",
                            },
                        ],
                    },
                    output=("Reading the invoices list view", "Writing the plan"),
                    input_tokens=3_800,
                    output_tokens=620,
                ),
            ),
        },
    ),
    Scenario(
        id="bold-ridge-3",
        template="debug-workflow",
        title="Nightly sync crashes with KeyError 'currency'",
        text="Since Tuesday the nightly sync stops half way.",
        minutes_ago=240,
        # One fix, one rejection: the template's iteration limit ends the cluster as failed.
        params={"max_iterations": 1},
        answers={
            "investigator": (
                Answer(
                    {
                        "fixPlan": "Default the currency to the account's currency when a "
                        "supplier omits it, and log the supplier id.",
                        "successCriteria": "The nightly sync completes on the recorded feed",
                        "rootCauses": ["Supplier feed v3 dropped the currency field"],
                        "evidence": ["The Tuesday feed has no currency on 212 lines"],
                        "affectedFiles": ["sync/suppliers.py"],
                    },
                    output=("Reproducing the crash on the Tuesday feed", "Found the root cause"),
                    input_tokens=4_100,
                    output_tokens=540,
                ),
            ),
            "fixer": (progress("Currency defaults to the account's; replaying the feed.", 80),),
            "validator": (
                verdict(
                    "The replay still fails on a second missing field.",
                    [("AC1", "FAIL", "KeyError 'vat_rate' on line 4411 of the feed")],
                    "KeyError 'vat_rate' on line 4411 of the feed",
                ),
            ),
        },
    ),
    Scenario(
        id="steady-lantern-12",
        template="worker-validator",
        title="Verify and process payment webhooks",
        text="The provider calls POST /hooks/payments with a signed JSON body. We must check "
        "the signature (HMAC-SHA256 over timestamp and body), refuse stale or replayed "
        "deliveries, process each event exactly once, and answer within two seconds even "
        "when the ledger is slow. Unknown event types must not crash the handler.",
        minutes_ago=360,
        params={"max_iterations": 6},
        answers=_long_run(),
    ),
)
