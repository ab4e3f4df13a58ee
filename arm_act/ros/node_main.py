"""The console-script main shared by the node executables."""
from __future__ import annotations

import sys

import rclpy
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor


def spin_node(node_class, args=None) -> None:
    """Init rclpy, spin one node on a SingleThreadedExecutor until Ctrl-C or SIGTERM, then
    destroy it (nodes close files, threads and the physics client there) and shut down.

    Single-threaded on purpose: every callback of our nodes is short (the heavy work, physics
    and inference, runs on the nodes' own threads), and rclpy's MultiThreadedExecutor costs
    so much per callback that beside a 100 Hz /clock and joint_states the policy node missed
    419 of 629 control ticks in 12 s; the SingleThreadedExecutor missed none (measured with
    sim_node in realtime, docs/architecture.md, "Threading").

    rclpy's own signal handlers (SIGINT and SIGTERM) shut the context down, which ends the
    spin between callbacks, never in the middle of one. Exits non-zero when the node says
    it failed (a `failed` attribute) or cannot be created.
    """
    rclpy.init(args=args)
    node = None
    status = 0
    try:
        node = node_class()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception as exc:  # e.g. a missing checkpoint: one line, not a traceback
        print(f"{node_class.__name__}: {exc}", file=sys.stderr)
        status = 1
    finally:
        if node is not None:
            status = status or int(bool(getattr(node, "failed", False)))
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    if status:
        sys.exit(status)
