"""expert_node: the scripted expert as a ROS controller.

Plans from the published topics alone (instruction, joint states, object markers) and
publishes the same command topics a policy does, so `sim_node + expert_node` over DDS is
the live counterpart of the in-process expert rollout (and of `arm-act collect`).

It follows the instruction of the `episode` message, which sim_node publishes again when a
new instruction changes the goal mid-episode (never for words it refused): at the first
tick that sees a new one, the expert re-plans from the current state (ScriptedExpert.retarget).
"""
from __future__ import annotations

import numpy as np

from arm_act.common import realtime
from arm_act.nodes.controller import ControllerNode
from arm_act.nodes.scheduling import normal_when_unpaced, read_priority, thread_priority_descriptor
from arm_act.ros import conversions as conv
from arm_act.sim import ExpertConfig, ScriptedExpert, perturbation_rng


class ExpertNode(ControllerNode):
    uses_objects = True
    diagnostics_topic = "expert/diagnostics"
    realtime_process = True  # its executable gets arm_act/common/realtime.py's settings

    def __init__(self, **kwargs):
        super().__init__("expert_node", **kwargs)
        self.declare_parameter("perturb_prob", 0.0)
        self.perturb_prob = float(self.get_parameter("perturb_prob").value)
        self.expert: ScriptedExpert | None = None
        self.planned_instruction: str | None = None  # the instruction the expert plans for
        # SCHED_FIFO priority of the control tick, planned inside it on the executor thread (the
        # thread the executable constructs the node on; ros2_control's thread_priority, 0: normal).
        self.declare_parameter("thread_priority", realtime.DEFAULT_THREAD_PRIORITY,
                               thread_priority_descriptor("the control tick (the executor thread)"))
        (priority,) = normal_when_unpaced(self, self.mode == "realtime", read_priority(self))
        realtime.realtime_thread(priority, "control tick (executor thread)", self.get_logger(),
                                 reception_threads=True)

    def observation_complete(self, stamp_ns: int, tick: int) -> bool:
        # The sim publishes the object markers every control tick, before the joint states.
        return super().observation_complete(stamp_ns, tick) and self.objects_stamp_ns == stamp_ns

    def on_new_episode(self, info: conv.EpisodeInfo) -> None:
        self.expert = None  # planned at the first tick that has this episode's objects

    def compute_command(self, stamp_ns: int, tick: int):
        info = self.episode
        if self.objects is None or self.objects_stamp_ns < info.start_ns:
            return None  # this episode's object markers have not arrived yet
        try:
            if self.expert is None:
                rng = perturbation_rng(info.seed)  # the in-process rule: the same perturbed episodes
                expert = ScriptedExpert(ExpertConfig(perturb_prob=self.perturb_prob), rng=rng)
                expert.reset(info.instruction, self.objects, self.joint_positions)
                self.expert, self.planned_instruction = expert, info.instruction
            elif info.instruction != self.planned_instruction:  # the goal changed mid-episode
                self.get_logger().info(f"new instruction {info.instruction!r}: re-planning")
                self.planned_instruction = info.instruction
                self.expert.retarget(info.instruction, self.objects, self.joint_positions)
            t = tick * (1.0 / info.control_rate)
            arm, gripper = self.expert.act(t, self.joint_positions, self.objects)
        except (ValueError, IndexError, ArithmeticError, np.linalg.LinAlgError) as exc:
            # Objects or an instruction the expert cannot plan from (no box, no block of the named
            # colour, a degenerate pose): hold, and plan again from the next markers.
            self.expert = None
            raise conv.ConversionError(f"the expert cannot plan from these objects and instruction: "
                                       f"{type(exc).__name__}: {exc}") from exc
        return np.asarray(arm, dtype=np.float64), float(gripper)


def main(args=None):
    from arm_act.ros.node_main import spin_node

    spin_node(ExpertNode, args)


if __name__ == "__main__":
    main()
