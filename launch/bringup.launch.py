"""The main job in a ROS 2 install: sim_node + policy_node (+ bag_recorder).

    ros2 launch arm_act bringup.launch.py
    ros2 launch arm_act bringup.launch.py mode:=lockstep seed:=100 record:=true bag_path:=/tmp/demo_bag
    ros2 launch arm_act bringup.launch.py namespace:=arm1 &  ros2 launch arm_act bringup.launch.py namespace:=arm2

Every node runs in `namespace` (default: none), /clock included (remapped to <namespace>/clock),
so two bringups on one ROS domain never see each other's topics, services, parameters or
clock. Discovery stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) unless
`discovery_range` says otherwise (SUBNET, SYSTEM_DEFAULT, OFF).

policy_node is a managed node: with autostart:=true (default) this file configures it (which
loads the checkpoint) and activates it once configured; with autostart:=false it waits,
unconfigured, for `ros2 lifecycle set <namespace>/policy_node configure` and `activate`.
With record:=true the first episode starts only once bag_recorder is subscribed to every topic.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, EmitEvent, RegisterEventHandler, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from launch_ros.parameter_descriptions import ParameterValue
from lifecycle_msgs.msg import Transition

from launch import LaunchDescription

# /clock is an absolute name: remapped into the namespace, a second bringup keeps its own.
CLOCK_REMAP = [("/clock", "clock")]


def generate_launch_description():
    share = get_package_share_directory("arm_act")
    sim_params = os.path.join(share, "config", "sim.yaml")
    policy_params = os.path.join(share, "config", "policy.yaml")
    arg = LaunchConfiguration
    namespace = arg("namespace")
    use_sim_time = ParameterValue(arg("use_sim_time"), value_type=bool)
    record = ParameterValue(arg("record"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace of every node and topic (e.g. arm1); /clock too"),
        DeclareLaunchArgument("discovery_range", default_value="LOCALHOST",
                              description="ROS_AUTOMATIC_DISCOVERY_RANGE: LOCALHOST, SUBNET, SYSTEM_DEFAULT or OFF"),
        DeclareLaunchArgument("checkpoint", default_value=os.path.join(share, "checkpoints", "default"),
                              description="policy checkpoint directory"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="configure and activate policy_node (lifecycle) at launch"),
        DeclareLaunchArgument("use_sim_time", default_value="true"),
        DeclareLaunchArgument("mode", default_value="realtime", description="realtime or lockstep"),
        DeclareLaunchArgument("execution", default_value="ensemble", description="ensemble or queue"),
        DeclareLaunchArgument("assist", default_value="false",
                              description="policy_node's hand-written assist (colour balance, aim, grasp check)"),
        DeclareLaunchArgument("gui", default_value="false", description="PyBullet's own viewer"),
        DeclareLaunchArgument("record", default_value="false", description="record a rosbag2 MCAP bag"),
        DeclareLaunchArgument("bag_path", default_value="",
                              description="bag directory (must not exist); empty: rosbag2_<date>-<time>[_<ns>]"),
        DeclareLaunchArgument("control_rate", default_value="50"),
        DeclareLaunchArgument("seed", default_value="0"),
        DeclareLaunchArgument("episodes", default_value="0", description="0: until stopped"),
        DeclareLaunchArgument("blocks", default_value="2-5", description="blocks per episode: N or LO-HI"),
        DeclareLaunchArgument("thread_priority", default_value="50",
                              description="SCHED_FIFO priority of sim_node's and policy_node's deadline "
                                          "threads (as ros2_control's); 0: the normal scheduler"),
        DeclareLaunchArgument("lock_memory", default_value="true",
                              description="lock sim_node's and policy_node's memory in RAM at start (mlockall, "
                                          "as ros2_control_node's lock_memory); needs root, CAP_IPC_LOCK or "
                                          "ulimit -l unlimited, else a warning"),
    ]
    environment = [SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", arg("discovery_range"))]
    sim = Node(
        package="arm_act", executable="sim_node", name="sim_node", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP,
        parameters=[sim_params, {
            "use_sim_time": use_sim_time,
            "mode": arg("mode"),
            "gui": ParameterValue(arg("gui"), value_type=bool),
            "control_rate": ParameterValue(arg("control_rate"), value_type=int),
            "seed": ParameterValue(arg("seed"), value_type=int),
            "episodes": ParameterValue(arg("episodes"), value_type=int),
            "blocks": arg("blocks"),
            "wait_for_recorder": record,
            "thread_priority": ParameterValue(arg("thread_priority"), value_type=int),
            "lock_memory": ParameterValue(arg("lock_memory"), value_type=bool),
        }],
    )
    policy = LifecycleNode(
        package="arm_act", executable="policy_node", name="policy_node", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP,
        parameters=[policy_params, {
            "use_sim_time": use_sim_time,
            "mode": arg("mode"),
            "checkpoint": arg("checkpoint"),
            "execution": arg("execution"),
            "assist": ParameterValue(arg("assist"), value_type=bool),
            "control_rate": ParameterValue(arg("control_rate"), value_type=int),
            "autostart": False,  # the transitions below drive it
            "thread_priority": ParameterValue(arg("thread_priority"), value_type=int),
            "lock_memory": ParameterValue(arg("lock_memory"), value_type=bool),
        }],
    )
    autostart = IfCondition(arg("autostart"))
    configure = EmitEvent(condition=autostart, event=ChangeState(
        lifecycle_node_matcher=matches_action(policy), transition_id=Transition.TRANSITION_CONFIGURE))
    # Activate after the configure transition only (not after a later deactivate).
    activate = RegisterEventHandler(condition=autostart, event_handler=OnStateTransition(
        target_lifecycle_node=policy, start_state="configuring", goal_state="inactive",
        entities=[EmitEvent(event=ChangeState(lifecycle_node_matcher=matches_action(policy),
                                              transition_id=Transition.TRANSITION_ACTIVATE))]))
    recorder = Node(
        package="arm_act", executable="bag_recorder", name="bag_recorder", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP, condition=IfCondition(arg("record")),
        parameters=[{"use_sim_time": use_sim_time, "bag_path": arg("bag_path")}],
    )
    return LaunchDescription(arguments + environment + [sim, policy, activate, configure, recorder])
