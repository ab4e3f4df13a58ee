"""The main job in a ROS 2 install: sim_node + policy_node (+ bag_recorder).

    ros2 launch arm_act bringup.launch.py
    ros2 launch arm_act bringup.launch.py mode:=lockstep seed:=100 record:=true bag_path:=/tmp/demo_bag
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription


def generate_launch_description():
    share = get_package_share_directory("arm_act")
    sim_params = os.path.join(share, "config", "sim.yaml")
    policy_params = os.path.join(share, "config", "policy.yaml")
    arg = LaunchConfiguration
    use_sim_time = ParameterValue(arg("use_sim_time"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("checkpoint", default_value=os.path.join(share, "checkpoints", "default"),
                              description="policy checkpoint directory"),
        DeclareLaunchArgument("use_sim_time", default_value="true"),
        DeclareLaunchArgument("mode", default_value="realtime", description="realtime or lockstep"),
        DeclareLaunchArgument("gui", default_value="false", description="PyBullet's own viewer"),
        DeclareLaunchArgument("record", default_value="false", description="record a rosbag2 MCAP bag"),
        DeclareLaunchArgument("bag_path", default_value="arm_act_bag"),
        DeclareLaunchArgument("control_rate", default_value="50"),
        DeclareLaunchArgument("seed", default_value="0"),
    ]
    sim = Node(
        package="arm_act", executable="sim_node", name="sim_node", output="screen",
        parameters=[sim_params, {
            "use_sim_time": use_sim_time,
            "mode": arg("mode"),
            "gui": ParameterValue(arg("gui"), value_type=bool),
            "control_rate": ParameterValue(arg("control_rate"), value_type=int),
            "seed": ParameterValue(arg("seed"), value_type=int),
        }],
    )
    policy = Node(
        package="arm_act", executable="policy_node", name="policy_node", output="screen",
        parameters=[policy_params, {
            "use_sim_time": use_sim_time,
            "mode": arg("mode"),
            "checkpoint": arg("checkpoint"),
            "control_rate": ParameterValue(arg("control_rate"), value_type=int),
        }],
    )
    recorder = Node(
        package="arm_act", executable="bag_recorder", name="bag_recorder", output="screen",
        condition=IfCondition(arg("record")),
        parameters=[{"use_sim_time": use_sim_time, "bag_path": arg("bag_path")}],
    )
    return LaunchDescription(arguments + [sim, policy, recorder])
