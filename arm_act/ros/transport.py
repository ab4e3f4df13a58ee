"""Which DDS transport the node executables use on one machine: UDP over loopback by default.

With ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST (the nodes' default) rmw_fastrtps gives every
participant Fast DDS's shared-memory transport beside UDP, whatever FASTDDS_BUILTIN_TRANSPORTS
says. A participant killed with SIGKILL leaves its shared-memory port behind, and a new one
can then match every topic yet receive nothing on some of them: a restarted policy_node got
/clock, joint states and episodes but no camera image for minutes, even after it subscribed
again (eProsima/Fast-DDS#5053, #5469). Over UDP a dead process leaves nothing behind.

So, when the range is LOCALHOST and rmw is Fast DDS, the executables ask rmw for its
SYSTEM_DEFAULT range and hand Fast DDS `fastdds_udp_loopback.xml`: the same discovery as
rmw's LOCALHOST (no multicast, unicast to 127.0.0.1) with UDP as the only transport. Such a
participant still talks to any other on the machine, shared memory or not. The latency cost
is measured in docs/ros.md ("Restarting a node").

Left alone, with rmw's own behaviour: ARM_ACT_DDS_TRANSPORT=shm; another range; another
rmw; a Fast DDS profile of the user's own (FASTDDS_DEFAULT_PROFILES_FILE); ROS_STATIC_PEERS
(rmw reads them only for the LOCALHOST and SUBNET ranges).
"""
from __future__ import annotations

import os
from pathlib import Path

SWITCH = "ARM_ACT_DDS_TRANSPORT"
CHOICES = ("udp", "shm")
PROFILE = Path(__file__).with_name("fastdds_udp_loopback.xml")
FAST_DDS = ("rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")
USER_PROFILE_VARIABLES = ("FASTDDS_DEFAULT_PROFILES_FILE", "FASTRTPS_DEFAULT_PROFILES_FILE")


def transport_choice(environ) -> str:
    """ARM_ACT_DDS_TRANSPORT from `environ` ("udp" when unset); ValueError for anything else."""
    choice = environ.get(SWITCH, "udp").strip().lower() or "udp"
    if choice not in CHOICES:
        raise ValueError(f"{SWITCH}={choice!r} must be one of {', '.join(CHOICES)}")
    return choice


def loopback_udp_applies(environ) -> bool:
    """Whether the UDP-only profile replaces rmw's LOCALHOST setting in this environment."""
    return (transport_choice(environ) == "udp"
            and environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "").strip().upper() == "LOCALHOST"
            and (environ.get("RMW_IMPLEMENTATION") or "rmw_fastrtps_cpp").strip() in FAST_DDS
            and not any(environ.get(name) for name in USER_PROFILE_VARIABLES)
            and not environ.get("ROS_STATIC_PEERS", "").strip()
            # An install without the profile keeps rmw's LOCALHOST: SYSTEM_DEFAULT without it
            # would be Fast DDS's own defaults, multicast discovery on every interface.
            and PROFILE.is_file())


def apply_transport(environ=os.environ) -> bool:
    """Before rclpy.init: switch `environ` to the UDP-only loopback profile where it applies
    (module docstring). Returns whether it did."""
    if not loopback_udp_applies(environ):
        return False
    environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "SYSTEM_DEFAULT"
    environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(PROFILE)
    return True
