"""arm_act: ROS 2 nodes, message conversions, bags and the `arm-act` command line.

The ROS-free cores live in the sibling packages `sim` (PyBullet world and expert) and
`policy` (the transformer); this package only wires them to topics.
"""
__version__ = "0.1.0"
