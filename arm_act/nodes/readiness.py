"""Is a controller ready to drive the arm? What sim_node's first episode waits for.

A writer on the command topic is not enough: a managed (lifecycle) controller such as
policy_node exists, and may even publish, before it is active. So for every node that writes
the command topic, ControllerReadiness asks the node's lifecycle state through the standard
`<node>/get_state` service (lifecycle_msgs/GetState) when it has one; a node without that
service (expert_node, a plain forward_command_controller publisher) counts as ready once it
writes the topic. One ready writer is enough.
"""
from __future__ import annotations

import threading

from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import GetState

ANSWER_TIMEOUT_S = 1.0  # a get_state call not answered by then counts as "not active yet"


def _join(namespace: str, name: str) -> str:
    return f"{namespace.rstrip('/')}/{name}"


class ControllerReadiness:
    """missing() -> None when a controller that can drive the arm writes `topic`, else what is
    missing, in words. Called from a thread other than the node's executor (which serves the
    service answers), as sim_node's loop does."""

    def __init__(self, node, topic: str):
        self.node = node
        self.topic = node.resolve_topic_name(topic)
        self._clients: dict[str, object] = {}

    def missing(self) -> str | None:
        writers = {(i.node_namespace, i.node_name) for i in self.node.get_publishers_info_by_topic(self.topic)}
        if not writers:
            return f"a controller publishing on {self.topic} (policy_node or expert_node)"
        inactive = []
        for namespace, name in sorted(writers):
            state = self._lifecycle_state(namespace, name)
            if state is None or state == State.PRIMARY_STATE_ACTIVE:
                return None
            inactive.append(f"{_join(namespace, name)} ({_LABELS.get(state, 'state ' + str(state))})")
        return (f"an active controller on {self.topic}: {', '.join(inactive)} "
                f"(`ros2 lifecycle set {inactive[0].split(' ')[0]} activate`)")

    def _lifecycle_state(self, namespace: str, name: str) -> int | None:
        """The node's lifecycle state id, 0 (unknown) when it does not answer in time, or
        None when it offers no get_state service (not a managed node)."""
        if not namespace.startswith("/"):
            return State.PRIMARY_STATE_UNKNOWN  # the writer's node is not discovered yet
        service = _join(namespace, name) + "/get_state"
        try:
            names = {n for n, _ in self.node.get_service_names_and_types_by_node(name, namespace)}
        except Exception:  # noqa: BLE001 - rclpy's RCLError: the node left the graph meanwhile
            return State.PRIMARY_STATE_UNKNOWN
        if service not in names:
            return None
        client = self._clients.get(service)
        if client is None:
            client = self._clients[service] = self.node.create_client(GetState, service)
        if not client.service_is_ready():
            return State.PRIMARY_STATE_UNKNOWN
        done = threading.Event()
        future = client.call_async(GetState.Request())
        future.add_done_callback(lambda _: done.set())
        if not done.wait(ANSWER_TIMEOUT_S) or future.result() is None:
            future.cancel()
            return State.PRIMARY_STATE_UNKNOWN
        return int(future.result().current_state.id)

    def close(self) -> None:
        for client in self._clients.values():
            self.node.destroy_client(client)
        self._clients.clear()


_LABELS = {State.PRIMARY_STATE_UNKNOWN: "not answering yet", State.PRIMARY_STATE_UNCONFIGURED: "unconfigured",
           State.PRIMARY_STATE_INACTIVE: "inactive", State.PRIMARY_STATE_FINALIZED: "finalized"}
