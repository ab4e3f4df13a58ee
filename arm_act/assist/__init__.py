"""The hand-written grasp assist around the network, opt-in (policy_node's `assist`): the aim
correction onto the target head's estimate and the grasp check (aim.py), the re-grasp reflex
(regrasp.py), the arm's kinematics from its URDF (kinematics.py), and the Panda's instance of
them (panda.py). The network, its runtime and its training (arm_act.policy) never import it;
ActionSelector takes an assist as an object with the GraspAssist interface."""
