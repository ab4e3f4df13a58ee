"""Expert demonstrations over ROS 2: sim_node + expert_node + bag_recorder.

    ros2 launch arm_act collect.launch.py episodes:=10 seed:=0 blocks:=2-5 out:=/tmp/demos

The in-process equivalent (faster, one bag per episode) is `arm-act collect` with the same
arguments: --episodes, --seed, --blocks, --out, --perturb.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription


def generate_launch_description():
    share = get_package_share_directory("arm_act")
    sim_params = os.path.join(share, "config", "sim.yaml")
    arg = LaunchConfiguration
    arguments = [
        DeclareLaunchArgument("episodes", default_value="10"),
        DeclareLaunchArgument("seed", default_value="0"),
        DeclareLaunchArgument("blocks", default_value="2-5"),
        DeclareLaunchArgument("out", default_value="demos"),
        DeclareLaunchArgument("perturb", default_value="0.0", description="expert perturbation probability"),
        DeclareLaunchArgument("mode", default_value="lockstep"),
    ]
    common = {"use_sim_time": True, "mode": arg("mode")}
    sim = Node(
        package="arm_act", executable="sim_node", name="sim_node", output="screen",
        parameters=[sim_params, common, {
            "episodes": ParameterValue(arg("episodes"), value_type=int),
            "seed": ParameterValue(arg("seed"), value_type=int),
            "blocks": arg("blocks"),
        }],
    )
    expert = Node(
        package="arm_act", executable="expert_node", name="expert_node", output="screen",
        parameters=[common, {"perturb_prob": ParameterValue(arg("perturb"), value_type=float)}],
    )
    recorder = Node(
        package="arm_act", executable="bag_recorder", name="bag_recorder", output="screen",
        parameters=[{"use_sim_time": True, "bag_path": arg("out")}],
    )
    return LaunchDescription(arguments + [sim, expert, recorder])
