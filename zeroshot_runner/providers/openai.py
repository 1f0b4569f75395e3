"""An OpenAI-compatible chat-completions endpoint (OpenAI itself, or a local model server)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from zeroshot_runner import __version__
from zeroshot_runner.backoff import Backoff, retry_after_seconds
from zeroshot_runner.providers.base import Job
from zeroshot_runner.records import JSON, Failed, Outcome, Usage
from zeroshot_runner.repair import Repair, Reply, run_with_repair
from zeroshot_runner.results import AgentOutput, last_json_object

_ERROR_CHARS = 500


class OpenAIProvider:
    """Sends the task's prompt as the user message and reads the first choice's content."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str | None,
        api_key: str | None,
        default_timeout: float,
        backoff: Backoff | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model = model
        self.default_timeout = default_timeout
        self.backoff = backoff or Backoff()
        headers = {"User-Agent": f"zeroshot-runner/{__version__}"}
        # Local servers usually need no key; OpenAI itself refuses a request without one.
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, transport=transport
        )

    def run(self, job: Job) -> Outcome:
        """Ask the endpoint once (retrying 429 and 5xx) and read its answer."""
        agent = job.claim.agent
        model = self.model or agent.model
        if not model:
            return Failed(
                error="no model for the openai provider: pass --model or give the agent a model",
                retryable=False,
            )
        timeout = agent.timeout_ms / 1000 if agent.timeout_ms else self.default_timeout
        question: dict[str, JSON] = {"role": "user", "content": job.claim.prompt}

        def attempt(repair: Repair | None) -> Reply | Failed:
            # A repair is a follow-up in the same conversation: the wrong answer, then what
            # is wrong with it.
            messages: list[JSON] = [question]
            if repair is not None:
                messages += [
                    {"role": "assistant", "content": repair.previous.read.text},
                    {"role": "user", "content": repair.prompt},
                ]
            return self._ask(job, model=model, messages=messages, timeout=timeout)

        return run_with_repair(job, attempt)

    def _ask(self, job: Job, *, model: str, messages: list[JSON], timeout: float) -> Reply | Failed:
        body: dict[str, JSON] = {"model": model, "messages": messages}
        if job.claim.agent.wants_json:
            body["response_format"] = {"type": "json_object"}
        attempt = 0
        while True:
            retry_after = None
            try:
                response = self._http.post(
                    "/chat/completions",
                    json=body,
                    timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
                )
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if response.is_success:
                    return self._reply(response, job, model=model)
                if response.status_code != 429 and response.status_code < 500:
                    return Failed(
                        error=f"the model endpoint refused the request: "
                        f"HTTP {response.status_code}: {_error_text(response)}",
                        retryable=False,
                    )
                problem = f"HTTP {response.status_code}: {_error_text(response)}"
                retry_after = retry_after_seconds(response)
            attempt += 1
            if attempt >= self.backoff.attempts:
                return Failed(
                    error=f"the model endpoint failed {attempt} times; last: {problem}",
                    retryable=True,
                )
            if job.stop.wait(self.backoff.delay(attempt - 1, retry_after=retry_after)):
                return Failed(error="the runner stopped the request", retryable=True)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def _reply(self, response: httpx.Response, job: Job, *, model: str) -> Reply | Failed:
        try:
            answer = response.json()
            content = answer["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError):
            return Failed(
                error=f"the model endpoint's answer has no message: {response.text[:_ERROR_CHARS]}",
                retryable=True,
            )
        if not isinstance(content, str):
            return Failed(error="the model answered without any text", retryable=True)
        for line in content.splitlines():
            job.emit(line)
        read = AgentOutput(
            text=content,
            result=last_json_object(content),
            usage=_usage(answer.get("usage"), model=answer.get("model") or model),
        )
        return Reply(read=read)


def _usage(usage: JSON, *, model: JSON) -> Usage | None:
    if not isinstance(usage, Mapping):
        return None
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    return Usage(
        input_tokens=_count(counts[0]),
        output_tokens=_count(counts[1]),
        model=model if isinstance(model, str) else None,
    )


def _count(value: JSON) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:_ERROR_CHARS] or response.reason_phrase
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])[:_ERROR_CHARS]
    if isinstance(error, str):
        return error[:_ERROR_CHARS]
    return response.text[:_ERROR_CHARS]
