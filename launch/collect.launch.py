"""Expert demonstrations over ROS 2: sim_node + expert_node + bag_recorder.

    ros2 launch arm_act collect.launch.py episodes:=10 seed:=0 blocks:=2-5 out:=/tmp/demos

The launch ends by itself: sim_node exits 0 after its episodes, and that shuts the launch
down (the recorder closes its bag on the SIGINT launch then sends). The first episode starts
only once the recorder is subscribed to every topic. `namespace`, `discovery_range` and
`dds_transport` work as in bringup.launch.py.

The in-process equivalent (faster, one bag per episode) is `arm-act collect` with the same
arguments: --episodes, --seed, --blocks, --out, --perturb.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler, SetEnvironmentVariable
from launch.event_handlers import OnProcessExit
from launch.events import Shutdown
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

CLOCK_REMAP = [("/clock", "clock")]


def generate_launch_description():
    share = get_package_share_directory("arm_act")
    sim_params = os.path.join(share, "config", "sim.yaml")
    arg = LaunchConfiguration
    namespace = arg("namespace")
    arguments = [
        DeclareLaunchArgument("namespace", default_value="", description="namespace of every node and topic"),
        DeclareLaunchArgument("discovery_range", default_value="LOCALHOST",
                              description="ROS_AUTOMATIC_DISCOVERY_RANGE: LOCALHOST, SUBNET, SYSTEM_DEFAULT or OFF"),
        DeclareLaunchArgument("dds_transport", default_value="udp",
                              description="with LOCALHOST discovery: udp (UDP over loopback) or shm "
                                          "(rmw_fastrtps's shared memory + UDP); ARM_ACT_DDS_TRANSPORT"),
        DeclareLaunchArgument("episodes", default_value="10", description="episodes; the launch ends after them"),
        DeclareLaunchArgument("seed", default_value="0"),
        DeclareLaunchArgument("blocks", default_value="2-5"),
        DeclareLaunchArgument("out", default_value="demos", description="bag directory (must not exist)"),
        DeclareLaunchArgument("perturb", default_value="0.0", description="expert perturbation probability"),
        DeclareLaunchArgument("mode", default_value="lockstep"),
        DeclareLaunchArgument("thread_priority", default_value="50",
                              description="SCHED_FIFO priority of sim_node's and expert_node's deadline "
                                          "threads; 0: the normal scheduler"),
    ]
    environment = [SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", arg("discovery_range")),
                   SetEnvironmentVariable("ARM_ACT_DDS_TRANSPORT", arg("dds_transport"))]
    common = {"use_sim_time": True, "mode": arg("mode"),
              "thread_priority": ParameterValue(arg("thread_priority"), value_type=int)}
    sim = Node(
        package="arm_act", executable="sim_node", name="sim_node", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP,
        parameters=[sim_params, common, {
            "episodes": ParameterValue(arg("episodes"), value_type=int),
            "seed": ParameterValue(arg("seed"), value_type=int),
            "blocks": arg("blocks"),
            "wait_for_recorder": True,
            "exit_when_done": True,
        }],
    )
    expert = Node(
        package="arm_act", executable="expert_node", name="expert_node", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP,
        parameters=[common, {"perturb_prob": ParameterValue(arg("perturb"), value_type=float)}],
    )
    recorder = Node(
        package="arm_act", executable="bag_recorder", name="bag_recorder", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP,
        parameters=[{"use_sim_time": True, "bag_path": arg("out")}],
    )
    # sim_node exits 0 after its episodes: end the launch (SIGINT to the others, bag closed).
    done = RegisterEventHandler(OnProcessExit(
        target_action=sim, on_exit=[EmitEvent(event=Shutdown(reason="sim_node finished its episodes"))]))
    return LaunchDescription(arguments + environment + [sim, expert, recorder, done])
