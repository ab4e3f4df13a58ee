"""The ROS 2 foundation: conversions between arrays and messages, QoS profiles, stamps, the
entry point every node executable shares, and the private DDS domain a process runs child
nodes and a probe in (private_domain.py)."""
