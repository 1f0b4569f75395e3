"""A cluster's messages for the logic tests: sequences and timestamps advance by themselves."""

from __future__ import annotations

from typing import Any

from runs.logic import ClusterInfo, LedgerView


class Run:
    """The messages of one cluster, published in order, in the wire shape of SPEC §1.1."""

    def __init__(self, cluster_id: str = "run-1", *, start: int = 1_760_000_000_000) -> None:
        self.cluster_id = cluster_id
        self.messages: list[dict[str, Any]] = []
        self._timestamp = start

    def publish(
        self,
        topic: str,
        sender: str,
        *,
        text: str | None = None,
        data: Any = None,
        metadata: Any = None,
        receiver: str = "broadcast",
        gap_ms: int = 1_000,
    ) -> dict[str, Any]:
        self._timestamp += gap_ms
        content: dict[str, Any] = {}
        if text is not None:
            content["text"] = text
        if data is not None:
            content["data"] = data
        message = {
            "id": f"msg_{len(self.messages) + 1:032x}",
            "sequence": str(len(self.messages) + 1),
            "timestamp": self._timestamp,
            "cluster_id": self.cluster_id,
            "topic": topic,
            "sender": sender,
            "receiver": receiver,
            "content": content,
            "metadata": metadata,
        }
        self.messages.append(message)
        return message

    @property
    def last(self) -> dict[str, Any]:
        return self.messages[-1]

    def view(self) -> LedgerView:
        return LedgerView(self.messages)


def cluster_of(agents: list[dict[str, Any]], cluster_id: str = "run-1") -> ClusterInfo:
    return ClusterInfo.of(id=cluster_id, config={"agents": agents})
