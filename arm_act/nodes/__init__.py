"""The ROS 2 nodes: sim_node, policy_node, expert_node, bag_recorder, and the demo viewer.

Nodes are thin: they read parameters, convert messages to arrays, call the cores in
arm_act.sim and arm_act.policy, and publish."""
