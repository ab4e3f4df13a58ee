"""arm_act: a simulated Franka Panda driven by an ACT-style transformer policy over ROS 2.

Layers, each importing only from the ones below it (tests/test_layers.py enforces this):

    cli/                 the `arm-act` command line: parse arguments, call one function, print
    eval/ bench/ data/   evaluation and reports, benchmarks, datasets and collection
    nodes/ bags/         the ROS 2 nodes; rosbag2 MCAP writing and reading
    ros/ common/         message conversions, QoS, node entry points; ROS-free helpers
    sim/ policy/         the ROS-free cores: the PyBullet world and the transformer policy

`sim` and `policy` are the repository's top-level folders, linked into this package so
they install as `arm_act.sim` and `arm_act.policy` rather than as generic top-level names.
"""
__version__ = "0.1.0"
