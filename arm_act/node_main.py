"""The console-script main shared by the node executables."""
from __future__ import annotations

import signal

import rclpy
from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor


def spin_node(node_class, args=None, threads: int = 2) -> None:
    """Init rclpy, spin one node on a MultiThreadedExecutor until Ctrl-C/SIGTERM, then
    destroy it (which lets nodes close files and threads) and shut down."""
    rclpy.init(args=args)
    node = None
    # SIGTERM (launch, systemd, docker stop) ends the spin like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        node = node_class()
        executor = MultiThreadedExecutor(num_threads=threads)
        executor.add_node(node)
        executor.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
