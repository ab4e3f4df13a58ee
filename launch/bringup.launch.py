"""The main job in a ROS 2 install: sim_node + policy_node (+ bag_recorder).

    ros2 launch arm_act bringup.launch.py
    ros2 launch arm_act bringup.launch.py mode:=lockstep seed:=100 record:=true bag_path:=/tmp/demo_bag
    ros2 launch arm_act bringup.launch.py namespace:=arm1 &  ros2 launch arm_act bringup.launch.py namespace:=arm2

Every node runs in `namespace` (default: none), /clock included (remapped to <namespace>/clock),
so two bringups on one ROS domain never see each other's topics, services, parameters or
clock. Discovery stays on this machine (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) unless
`discovery_range` says otherwise (SUBNET, SYSTEM_DEFAULT, OFF), over UDP on loopback unless
`dds_transport:=shm` (arm_act/ros/transport.py: why not Fast DDS's shared memory).

policy_node is a managed node that drives its own lifecycle: with autostart:=true (default)
it configures itself (which loads the checkpoint) and activates; with autostart:=false it
waits, unconfigured, for `ros2 lifecycle set <namespace>/policy_node configure` and `activate`,
and each transition does only what it says. sim_node starts the first episode once a
controller is active, so no episode runs without one. With respawn:=true a node that dies
is started again (launch's respawn, after RESPAWN_DELAY_S) and the loop goes on: a
new policy_node activates itself, a new sim_node starts its clock again, a new bag_recorder
starts a new bag (with the default, date-named bag_path). With record:=true the first
episode starts only once bag_recorder is subscribed to every topic.
"""
import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.parameter_descriptions import ParameterValue

from launch import LaunchDescription

# /clock is an absolute name: remapped into the namespace, a second bringup keeps its own.
CLOCK_REMAP = [("/clock", "clock")]
# With respawn:=true: seconds between a node's death and its new start (launch takes a number
# here, not a substitution).
RESPAWN_DELAY_S = 1.0


def generate_launch_description():
    share = get_package_share_directory("arm_act")
    sim_params = os.path.join(share, "config", "sim.yaml")
    policy_params = os.path.join(share, "config", "policy.yaml")
    arg = LaunchConfiguration
    namespace = arg("namespace")
    respawn = arg("respawn")  # ExecuteProcess takes it as a substitution ("true"/"false")
    use_sim_time = ParameterValue(arg("use_sim_time"), value_type=bool)
    record = ParameterValue(arg("record"), value_type=bool)
    arguments = [
        DeclareLaunchArgument("namespace", default_value="",
                              description="namespace of every node and topic (e.g. arm1); /clock too"),
        DeclareLaunchArgument("discovery_range", default_value="LOCALHOST",
                              description="ROS_AUTOMATIC_DISCOVERY_RANGE: LOCALHOST, SUBNET, SYSTEM_DEFAULT or OFF"),
        DeclareLaunchArgument("dds_transport", default_value="udp",
                              description="with LOCALHOST discovery: udp (UDP over loopback) or shm "
                                          "(rmw_fastrtps's shared memory + UDP); ARM_ACT_DDS_TRANSPORT"),
        DeclareLaunchArgument("checkpoint", default_value=os.path.join(share, "checkpoints", "default"),
                              description="policy checkpoint directory"),
        DeclareLaunchArgument("autostart", default_value="true",
                              description="policy_node configures and activates itself (lifecycle) at start"),
        DeclareLaunchArgument("respawn", default_value="false",
                              description="start a node again when it dies (launch_ros respawn)"),
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
    environment = [SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", arg("discovery_range")),
                   SetEnvironmentVariable("ARM_ACT_DDS_TRANSPORT", arg("dds_transport"))]
    sim = Node(
        package="arm_act", executable="sim_node", name="sim_node", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP, respawn=respawn, respawn_delay=RESPAWN_DELAY_S,
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
        remappings=CLOCK_REMAP, respawn=respawn, respawn_delay=RESPAWN_DELAY_S,
        parameters=[policy_params, {
            "use_sim_time": use_sim_time,
            "mode": arg("mode"),
            "checkpoint": arg("checkpoint"),
            "execution": arg("execution"),
            "assist": ParameterValue(arg("assist"), value_type=bool),
            "control_rate": ParameterValue(arg("control_rate"), value_type=int),
            "autostart": ParameterValue(arg("autostart"), value_type=bool),
            "thread_priority": ParameterValue(arg("thread_priority"), value_type=int),
            "lock_memory": ParameterValue(arg("lock_memory"), value_type=bool),
        }],
    )
    recorder = Node(
        package="arm_act", executable="bag_recorder", name="bag_recorder", namespace=namespace, output="screen",
        remappings=CLOCK_REMAP, respawn=respawn, respawn_delay=RESPAWN_DELAY_S, condition=IfCondition(arg("record")),
        parameters=[{"use_sim_time": use_sim_time, "bag_path": arg("bag_path")}],
    )
    return LaunchDescription(arguments + environment + [sim, policy, recorder])
