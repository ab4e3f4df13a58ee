"""A private DDS domain for a process that starts nodes as children and watches them with a
probe node of its own (`arm-act eval --live`, `arm-act bench` over DDS).

Set-up, on entering: `env`, the children's environment (ROS_DOMAIN_ID set, discovery on this
machine only); ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST in this process's os.environ too, since
rcl reads it when the probe's participant is created (rclpy.init); a fresh rclpy.Context
initialised on the domain and a SingleThreadedExecutor on it.

Teardown, on leaving, whatever ended the block (a child that failed, an exception, a
KeyboardInterrupt), in this order:
1. the children stop (`children.stop()`), while the probe still listens;
2. the executor shuts down and its spinner thread is joined;
3. the probe node is destroyed (after its executor's thread is gone);
4. the context is shut down;
5. ROS_AUTOMATIC_DISCOVERY_RANGE is restored in os.environ (removed where it was unset), even
   when a step before it raised.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

RANGE = "ROS_AUTOMATIC_DISCOVERY_RANGE"


class Stoppable(Protocol):
    def stop(self) -> None: ...


class PrivateDomain:
    """with PrivateDomain(domain_id) as dds: dds.children = ...; dds.spin(probe_node); ...

    children: whatever runs the nodes (arm_act.common.processes.NodeProcesses, or an
    in-process stand-in), anything with stop(); set it as soon as it exists, since the
    teardown stops it first. spin() serves one probe node on a thread of its own."""

    def __init__(self, domain_id: int, spin_join_timeout_s: float = 5.0):
        self.domain_id = domain_id
        self.spin_join_timeout_s = spin_join_timeout_s
        self.env: dict[str, str] = {}
        self.context = None
        self.executor = None
        self.children: Stoppable | None = None
        self.probe = None  # the node spin() serves
        self.spinner: threading.Thread | None = None
        self._previous_range: str | None = None

    def __enter__(self) -> PrivateDomain:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        self.env = {**os.environ, "ROS_DOMAIN_ID": str(self.domain_id), RANGE: "LOCALHOST"}
        self._previous_range = os.environ.get(RANGE)
        os.environ[RANGE] = "LOCALHOST"  # the probe's participant too
        try:
            self.context = rclpy.Context()
            rclpy.init(context=self.context, domain_id=self.domain_id)
            self.executor = SingleThreadedExecutor(context=self.context)
        except BaseException:
            self._close()
            raise
        return self

    def spin(self, node, target: Callable[[], Any] | None = None, name: str = "probe") -> threading.Thread:
        """Add `node` to the executor and spin it on a daemon thread called `name`; target: what
        that thread runs instead of executor.spin() (it must end in executor.spin())."""
        self.probe = node
        self.executor.add_node(node)
        self.spinner = threading.Thread(target=target or self.executor.spin, name=name, daemon=True)
        self.spinner.start()
        return self.spinner

    def __exit__(self, *exc) -> None:
        self._close()

    def _close(self) -> None:
        import rclpy

        try:
            if self.children is not None:
                self.children.stop()
            if self.executor is not None:
                self.executor.shutdown(timeout_sec=2.0)
            if self.spinner is not None:
                self.spinner.join(timeout=self.spin_join_timeout_s)
            if self.probe is not None:
                self.probe.destroy_node()
            if self.context is not None and self.context.ok():
                rclpy.shutdown(context=self.context)
        finally:
            if self._previous_range is None:
                os.environ.pop(RANGE, None)
            else:
                os.environ[RANGE] = self._previous_range
