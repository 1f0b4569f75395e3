"""``python -m zeroshot_runner``: the command line of the runner (SPEC §7.6)."""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
import socket
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from zeroshot_runner.client import WorkClient
from zeroshot_runner.providers.agent_cli import ADAPTERS, AgentCli, ModelTable, ModelTableError
from zeroshot_runner.providers.base import Provider
from zeroshot_runner.providers.command import CommandProvider
from zeroshot_runner.providers.openai import OpenAIProvider
from zeroshot_runner.providers.routing import ProviderSet
from zeroshot_runner.providers.scripted import ScriptedProvider, ScriptError
from zeroshot_runner.worker import Runner, RunnerSettings
from zeroshot_runner.workspace import WorkspaceError, Workspaces, WorktreeWorkspaces

PROVIDERS = ("claude", "codex", "gemini", "opencode", "command", "openai", "scripted")

MAX_WAIT = 30.0
# Beyond the agents' own kill grace, how long a stopping runner waits before failing their
# tasks itself (pipes to drain, a report to send).
_STOP_MARGIN = 5.0


def build_parser() -> argparse.ArgumentParser:
    """The runner's options."""
    parser = argparse.ArgumentParser(
        prog="python -m zeroshot_runner",
        description="Claim tasks from a zeroshot-web server and run their agents.",
    )
    server = parser.add_argument_group("server")
    server.add_argument(
        "--url",
        default=os.environ.get("ZEROSHOT_WEB_URL", "http://127.0.0.1:8000"),
        help="the server's URL (default: $ZEROSHOT_WEB_URL or http://127.0.0.1:8000)",
    )
    server.add_argument(
        "--key",
        help="API key (default: $ZEROSHOT_WEB_KEY, better: a command line is visible to all)",
    )
    server.add_argument(
        "--worker",
        default=f"{socket.gethostname()}:{os.getpid()}",
        help="this runner's name on its tasks (default: host:pid)",
    )

    work = parser.add_argument_group("which tasks")
    work.add_argument("--cluster", help="claim only this cluster's tasks")
    work.add_argument(
        "--agent",
        action="append",
        default=[],
        dest="agents",
        metavar="ID",
        help="claim only this agent's tasks (repeatable)",
    )
    work.add_argument(
        "--role",
        action="append",
        default=[],
        dest="roles",
        metavar="ROLE",
        help="claim only tasks of agents with this role (repeatable)",
    )
    work.add_argument(
        "--label",
        action="append",
        default=[],
        dest="labels",
        type=_label,
        metavar="KEY=VALUE",
        help="runner pools: claim only tasks of clusters carrying this label (repeatable)",
    )
    work.add_argument(
        "--concurrency",
        type=_positive_int,
        default=1,
        metavar="N",
        help="tasks run at once (default: 1)",
    )
    work.add_argument(
        "--exit-when-done",
        action="store_true",
        help="with --cluster: exit once that cluster has ended",
    )
    work.add_argument(
        "--lease",
        type=_positive_float,
        default=60.0,
        metavar="SECONDS",
        help="lease asked for each task; heartbeats every third of it (default: 60)",
    )
    work.add_argument(
        "--wait",
        type=_wait_seconds,
        default=10.0,
        metavar="SECONDS",
        help=f"long-poll of each claim, at most {MAX_WAIT:g} (default: 10)",
    )

    agents = parser.add_argument_group("how agents run")
    agents.add_argument(
        "--provider",
        type=_provider_names,
        required=True,
        metavar="NAME[,NAME…]",
        help=f"one or more of {', '.join(PROVIDERS)}; with several, the agent's `provider` "
        "picks one (the first serves agents that name none)",
    )
    agents.add_argument("--command", help="command: the shell command that runs an agent")
    agents.add_argument(
        "--models",
        type=Path,
        metavar="FILE",
        help="claude/codex/gemini/opencode: a JSON file of model levels per provider, "
        "replacing the defaults it names",
    )
    agents.add_argument(
        "--auto-approve",
        action="store_true",
        help="claude/codex/gemini: run the CLI unattended, its tools allowed without asking "
        "(needed for agents that edit files; use it with --workspace worktree)",
    )
    agents.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
        help="openai: the endpoint's base URL (default: $OPENAI_BASE_URL or OpenAI's)",
    )
    agents.add_argument("--model", help="openai: the model (default: the agent's model)")
    agents.add_argument("--script", type=Path, help="scripted: the JSON file of results")
    agents.add_argument(
        "--timeout",
        type=_positive_float,
        default=3600.0,
        metavar="SECONDS",
        help="a task's time limit when its agent sets no timeout (default: 3600)",
    )
    agents.add_argument(
        "--kill-grace",
        type=_non_negative_float,
        default=5.0,
        metavar="SECONDS",
        help="command: from SIGTERM to SIGKILL of an agent's processes (default: 5)",
    )

    place = parser.add_argument_group("where agents run")
    place.add_argument(
        "--workspace",
        choices=["none", "worktree"],
        default="none",
        help="none: in this directory (default); worktree: in a git worktree and branch of "
        "each cluster's own, removed when the cluster ends (the branch is kept)",
    )
    place.add_argument("--repo", type=Path, help="worktree: the git repository")
    place.add_argument("--base", help="worktree: what new branches start from (default: HEAD)")
    place.add_argument(
        "--worktrees",
        type=Path,
        default=Path(tempfile.gettempdir()) / "zeroshot-worktrees",
        metavar="DIR",
        help="worktree: where the worktrees go (default: %(default)s)",
    )

    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run until stopped; the exit status: 0 after a clean stop, 1 when refused, 2 for usage."""
    parser = build_parser()
    args = parser.parse_args(argv)
    key = args.key or os.environ.get("ZEROSHOT_WEB_KEY")
    if not key:
        parser.error("an API key is needed: --key or $ZEROSHOT_WEB_KEY")
    if args.exit_when_done and not args.cluster:
        parser.error("--exit-when-done needs --cluster")
    try:
        provider = ProviderSet({name: _provider(args, name) for name in args.provider})
        workspaces = _workspaces(args)
    except (ScriptError, ModelTableError, WorkspaceError, ValueError) as error:
        parser.error(str(error))

    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    if args.log_level != "DEBUG":
        # httpx logs every request at INFO: a long-polling runner would log little else.
        logging.getLogger("httpx").setLevel(logging.WARNING)

    client = WorkClient(url=args.url, key=key)
    runner = Runner(
        client=client,
        provider=provider,
        settings=RunnerSettings(
            worker=args.worker,
            cluster=args.cluster,
            agents=tuple(args.agents),
            roles=tuple(args.roles),
            claim_labels=tuple(dict(args.labels).items()),
            claim_providers=_claim_providers(args.provider),
            concurrency=args.concurrency,
            wait=args.wait,
            lease=args.lease,
            exit_when_done=args.exit_when_done,
            stop_grace=args.kill_grace + _STOP_MARGIN,
        ),
        workspaces=workspaces,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        runner.request_stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    logging.getLogger(__name__).info(
        "runner %s: %s provider, %d slot(s), workspace %s, labels %s, server %s",
        args.worker,
        ",".join(args.provider),
        args.concurrency,
        args.workspace,
        ",".join(f"{k}={v}" for k, v in dict(args.labels).items()) or "none",
        client.base_url,
    )
    try:
        return runner.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        provider.close()
        client.close()


def _provider(args: argparse.Namespace, name: str) -> Provider:
    if name in ADAPTERS:
        return CommandProvider(
            default_timeout=args.timeout,
            kill_grace=args.kill_grace,
            agent_cli=AgentCli(
                adapter=ADAPTERS[name],
                models=ModelTable.load(args.models),
                auto_approve=args.auto_approve,
            ),
        )
    if name == "command":
        if not args.command:
            raise ValueError("--provider command needs --command")
        return CommandProvider(
            command=args.command, default_timeout=args.timeout, kill_grace=args.kill_grace
        )
    if name == "scripted":
        if args.script is None:
            raise ValueError("--provider scripted needs --script")
        return ScriptedProvider.from_file(args.script)
    return OpenAIProvider(
        base_url=args.base_url,
        model=args.model,
        api_key=os.environ.get("OPENAI_API_KEY"),
        default_timeout=args.timeout,
    )


def _workspaces(args: argparse.Namespace) -> Workspaces | None:
    if args.workspace == "none":
        if args.repo is not None or args.base is not None:
            raise ValueError("--repo and --base go with --workspace worktree")
        return None
    if args.repo is None:
        raise ValueError("--workspace worktree needs --repo")
    return WorktreeWorkspaces(repo=args.repo, root=args.worktrees, base=args.base)


def _provider_names(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in PROVIDERS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown provider {', '.join(unknown) or repr(text)}; "
            f"one or more of {', '.join(PROVIDERS)}"
        )
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError("a provider is named twice")
    return names


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError("must be a number more than 0")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError("must be a number, 0 or more")
    return value


def _wait_seconds(text: str) -> float:
    value = _non_negative_float(text)
    if value > MAX_WAIT:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_WAIT:g}")
    return value


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    return key, value


def _claim_providers(names: Sequence[str]) -> tuple[str, ...]:
    """What the claims ask for: a runner serving several providers claims only agents naming
    one of them (or none); a runner given one runs every agent on it, so it asks for any."""
    return tuple(names) if len(names) > 1 else ()
