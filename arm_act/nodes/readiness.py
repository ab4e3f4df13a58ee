"""Is a controller ready to drive the arm, is the recorder recording everything? What
sim_node's first episode waits for (PeerWait polls both until nothing is missing).

A writer on the command topic is not enough: a managed (lifecycle) controller such as
policy_node exists, and may even publish, before it is active. So for every node that writes
the command topic, ControllerReadiness asks the node's lifecycle state through the standard
`<node>/get_state` service (lifecycle_msgs/GetState) when it has one; a node without that
service (expert_node, a plain forward_command_controller publisher) counts as ready once it
writes the topic. One ready writer is enough.

RecorderReadiness asks the graph whether the bag recorder (a node of a given name, in the
node's namespace) reads every topic: our own writers have matched its readers, and, where it
reports them on <recorder>/publishers_matched, its command readers have matched every
command writer in the graph.
"""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from lifecycle_msgs.msg import State
from lifecycle_msgs.srv import GetState

ANSWER_TIMEOUT_S = 1.0  # a get_state call not answered by then counts as "not active yet"
WAIT_REPORT_S = 3.0  # wall seconds between "waiting for ..." log lines (PeerWait)
WAIT_POLL_S = 0.05  # wall seconds between two checks of what is missing (PeerWait)


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


class RecorderReadiness:
    """missing(...) -> what keeps the recorder from recording a whole episode, in words (empty
    when nothing). report() takes the recorder's report on `matches_topic`: a JSON object of
    topic -> how many publishers its reader there has matched (ValueError when it is not one).
    The node's graph calls (get_subscriptions_info_by_topic, count_publishers, get_namespace)
    are all it uses."""

    def __init__(self, node, matches_topic: str):
        self.node = node
        self.matches_topic = matches_topic
        self.matches: dict[str, int] | None = None  # the recorder's latest report

    def report(self, data: str) -> None:
        report = json.loads(data)
        if not isinstance(report, dict):
            raise ValueError(f"{data!r} is not a JSON object")
        self.matches = {str(topic): int(count) for topic, count in report.items()}

    def missing(self, name: str, reported: bool, topics: dict[str, object]) -> list[str]:
        """What the recorder `name` still misses. `topics`: every topic to record, with our
        writer on it, or None for another node's writer (the commands); `reported`: the
        recorder sends its matching report (else another node's writer counts once the
        recorder's reader is in the graph)."""
        missing = []
        namespace = self.node.get_namespace()
        matches = self.matches
        if reported and matches is None:
            missing.append(f"{name}'s report on {self.matches_topic} of the publishers its "
                           "readers have matched (wait_for_recorder)")
        unrecorded = []
        for topic, pub in topics.items():
            infos = self.node.get_subscriptions_info_by_topic(topic)
            present = any(i.node_name == name and i.node_namespace == namespace for i in infos)
            # Seen in the graph and matched by our writer (the graph is told a little earlier).
            if not present or (pub is not None and pub.get_subscription_count() < len(infos)):
                unrecorded.append(topic)
            elif pub is None and reported and matches is not None:
                # Another node's writer (the controller's commands): our graph shows it before
                # the recorder's reader has matched it, and what it sends until then is lost.
                publishers = self.node.count_publishers(topic)
                if matches.get(topic, 0) < publishers:
                    unrecorded.append(f"{topic} (its reader has matched {matches.get(topic, 0)} of "
                                      f"{publishers} publishers)")
        if unrecorded:
            missing.append(f"{name} recording {', '.join(sorted(unrecorded))} (wait_for_recorder)")
        return missing


class PeerWait:
    """Before the first episode: run() polls missing() (a list of what is missing, in words)
    until it is empty or `stop` is set, logging what is missing every `report_s` wall seconds
    and once that everything is here. `waiting` is the latest answer."""

    def __init__(self, missing: Callable[[], list[str]], logger, report_s: float = WAIT_REPORT_S,
                 poll_s: float = WAIT_POLL_S, clock: Callable[[], float] = time.monotonic):
        if not (report_s >= 0 and poll_s > 0):
            raise ValueError(f"report every {report_s!r} s, poll every {poll_s!r} s: need 0 or more, above 0")
        self.missing = missing
        self.logger = logger
        self.report_s = report_s
        self.poll_s = poll_s
        self.clock = clock
        self.waiting: list[str] = []

    def run(self, stop: threading.Event) -> bool:
        """True once nothing is missing, False when stopped first."""
        last_report = None
        while not stop.is_set():
            missing = self.missing()
            self.waiting = missing
            if not missing:
                if last_report is not None:
                    self.logger.info("everything the first episode waits for is here")
                return True
            now = self.clock()
            if last_report is None or now - last_report >= self.report_s:
                self.logger.info("waiting for " + "; ".join(missing))
                last_report = now
            stop.wait(self.poll_s)
        return False
