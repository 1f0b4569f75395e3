"""A runner serving several providers (``--provider claude,codex``): the agent's ``provider``
(zeroshot's field) picks one."""

from __future__ import annotations

from collections.abc import Mapping

from zeroshot_runner.providers.base import Job, Provider
from zeroshot_runner.records import Failed, Outcome


class ProviderSet:
    """Runs each agent on the provider its config names; the first one serves agents that name
    none. A runner given one provider runs every agent on it, as before named providers."""

    def __init__(self, providers: Mapping[str, Provider]) -> None:
        if not providers:
            raise ValueError("a runner needs at least one provider")
        self.providers = dict(providers)
        self.names = tuple(self.providers)

    def run(self, job: Job) -> Outcome:
        """Run the job on its agent's provider."""
        if len(self.names) == 1:
            return self.providers[self.names[0]].run(job)
        wanted = job.claim.agent.config.get("provider")
        if not isinstance(wanted, str) or not wanted:
            return self.providers[self.names[0]].run(job)
        provider = self.providers.get(wanted)
        if provider is None:
            # Until claims filter on providers, another runner may serve this agent.
            return Failed(
                error=f"agent {job.claim.agent_id} runs on provider {wanted!r}; this runner "
                f"serves {', '.join(self.names)}",
                retryable=True,
            )
        return provider.run(job)

    def close(self) -> None:
        """Close every provider."""
        for provider in self.providers.values():
            provider.close()
