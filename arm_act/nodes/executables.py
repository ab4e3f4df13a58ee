"""The node executables (setup.py console_scripts: `ros2 run arm_act <name>`).

A light module on purpose: it imports nothing heavy at the top, so the stop-signal handlers
(arm_act.ros.node_main.StopSignals) are in place before the node's own module pulls in
rclpy, torch and PyBullet (seconds). A SIGINT during those imports was swallowed by some
import and ignored, or ended the process with a KeyboardInterrupt traceback; now it ends
the process with 0. (Only the interpreter's own start, about 0.2 s before any project code
runs, is left to Python's default handler.) The same import runs after the DDS participant
has started, so the running nodes discover this one while it loads (NodeLoader).
"""
from __future__ import annotations

import importlib
import os
import sys

from arm_act.ros.node_main import StopSignals, ignore_stop_signals, spin_node

EXECUTABLES = {  # name -> (module, node class, sim time by default)
    "sim_node": ("arm_act.nodes.sim_node", "SimNode", False),  # the clock itself
    "policy_node": ("arm_act.nodes.policy_node", "PolicyNode", True),
    "expert_node": ("arm_act.nodes.expert_node", "ExpertNode", True),
}


class NodeLoader:
    """Imports the node's module when called, after rclpy has started the DDS participant
    (arm_act.ros.node_main.early_participant): discovery runs while the module loads."""

    def __init__(self, module: str, class_name: str):
        self.module, self.class_name = module, class_name
        self.__name__ = class_name  # how run_node names the node in an error line

    def __call__(self) -> type:
        return getattr(importlib.import_module(self.module), self.class_name)


def _console_script(name: str):
    def main() -> None:
        signals = StopSignals().install()
        module, class_name, sim_time = EXECUTABLES[name]
        spin_node(NodeLoader(module, class_name), use_sim_time=sim_time, signals=signals)

    main.__name__ = main.__qualname__ = name
    main.__doc__ = f"`ros2 run arm_act {name}`"
    return main


sim_node = _console_script("sim_node")
policy_node = _console_script("policy_node")
expert_node = _console_script("expert_node")


def bag_recorder() -> None:
    """`ros2 run arm_act bag_recorder` (it has its own main: its bag closes in its loop)."""
    signals = StopSignals().install()
    from arm_act.nodes import bag_recorder as recorder

    if signals.event.is_set():  # stopped while importing: nothing was recorded, nothing to close
        ignore_stop_signals()
        os._exit(0)
    sys.exit(recorder.main())
