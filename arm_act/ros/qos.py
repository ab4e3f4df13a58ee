"""The QoS profiles of the live topics, one home for every node, benchmark and test.

- TRANSIENT_LOCAL: `task` and `episode`. Published once per change (not per tick) and
  latched: reliable, depth 1, transient-local durability, so a node that starts or
  subscribes late still receives the current instruction and episode at once. Publisher
  and subscriber must both use it (a volatile subscriber never gets the latched sample).
- SENSOR_DATA: what subscribers of camera images (and viewers of joint states) use: rclpy's
  qos_profile_sensor_data (best effort, keep last 5). It matches the publishers' default
  reliable QoS, and a reader that falls behind drops old frames instead of stalling the
  writer: a stale image is worth nothing to a controller.
- Everything else (joint_states, commands, /clock, the policy's outputs): the default
  reliable QoS with a history depth given where the publisher or subscription is made.

The bag recorder offers each topic the QoS its publishers offer (nodes/bag_recorder.py), and
bags store it (bags/codec.py).
"""
from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

TRANSIENT_LOCAL = QoSProfile(
    depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
)
SENSOR_DATA: QoSProfile = qos_profile_sensor_data

__all__ = ["SENSOR_DATA", "TRANSIENT_LOCAL"]
