"""A runner serving several providers: the agent's ``provider`` picks one."""

from __future__ import annotations

from tests.runner.helpers import claim_for, job_for
from tests.runner.test_worker import scripted
from zeroshot_runner.providers.routing import ProviderSet
from zeroshot_runner.records import Completed, Failed


def test_the_agents_provider_picks_the_first_serves_the_rest_and_an_unserved_one_fails() -> None:
    providers = ProviderSet(
        {
            "claude": scripted({"*": [{"result": {"by": "claude"}}]}),
            "codex": scripted({"*": [{"result": {"by": "codex"}}]}),
        }
    )

    def run(**agent: object) -> object:
        job, _ = job_for(claim_for(**agent))
        return providers.run(job)

    assert run(provider="codex") == Completed(result={"by": "codex"}, output='{"by": "codex"}')
    assert run() == Completed(result={"by": "claude"}, output='{"by": "claude"}')
    unserved = run(provider="gemini")
    assert isinstance(unserved, Failed)
    assert unserved.retryable is True
    assert "serves claude, codex" in unserved.error


def test_one_provider_serves_every_agent_whatever_it_names() -> None:
    providers = ProviderSet({"scripted": scripted({"*": [{"result": {"ok": True}}]})})
    job, _ = job_for(claim_for(provider="claude"))

    assert isinstance(providers.run(job), Completed)
