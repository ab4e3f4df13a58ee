"""ament_python package arm_act: the ROS nodes and tools (arm_act/), the PyBullet sim (sim/) and
the transformer policy (policy/), with launch files, parameter files and the shipped checkpoint.

sim/ and policy/ install as arm_act.sim and arm_act.policy: arm_act/sim and arm_act/policy are
symbolic links to them. A package_dir mapping would say the same, but `colcon build
--symlink-install` (setup.py develop) refuses it ("package directory 'sim' does not exist");
the links work with pip, wheels and colcon alike."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "arm_act"


def _files(pattern):
    return [path for path in glob(pattern) if not path.endswith("/")]


setup(
    name=PACKAGE,
    version="0.1.0",
    # find_packages follows the sim/ and policy/ links, so every layer is found, new ones included.
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    package_data={f"{PACKAGE}.ros": ["*.xml"]},  # the Fast DDS profile (arm_act/ros/transport.py)
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", _files("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", _files("config/*.yaml") + _files("config/*.json")),
        (f"share/{PACKAGE}/checkpoints/default", _files("checkpoints/default/*")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="arm_act maintainers",
    maintainer_email="arm-act@example.com",
    description="Simulated Panda arm driven by an ACT-style transformer policy over ROS 2",
    license="Apache-2.0",
    entry_points={
        "console_scripts": [
            # (arm_act.nodes.executables: our signal handlers before the node's heavy imports)
            "sim_node = arm_act.nodes.executables:sim_node",
            "expert_node = arm_act.nodes.executables:expert_node",
            "policy_node = arm_act.nodes.executables:policy_node",
            "bag_recorder = arm_act.nodes.executables:bag_recorder",
            "arm-act = arm_act.cli.main:main",
        ],
    },
)
