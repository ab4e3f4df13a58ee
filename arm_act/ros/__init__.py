"""The ROS 2 foundation: conversions between arrays and messages, QoS profiles, stamps, and the
entry point every node executable shares."""
