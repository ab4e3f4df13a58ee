"""ActionSelector: the inference pipeline from observations to commands (LeRobot's
`select_action`), one stage after another:

    images, joints -> network (PolicyRuntime.predict_chunk; colour balance first with the assist)
                   -> latency gate (arm_act.policy.latency_gate: when a chunk may act)
                   -> chunk executor (the runtime's temporal ensembling or queue)
                   -> grasp assist (optional, arm_act.assist: aim, grasp check, re-grasp)
                   -> command limiter (joint limits and speed) -> arm (7,) rad, gripper m

policy_node (lockstep and realtime), in-process evaluation (arm_act.eval.in_process.PolicyAgent)
and takeover collection (TakeoverAgent, `arm-act collect --policy`) all turn chunks into
commands here, so each stage exists once:

    selector = ActionSelector(runtime, latency_ticks=1, limiter=CommandLimiter(3.0, 50.0),
                              aim=panda_aim(50.0))   # arm_act.assist.panda; None: no assist
    selector.reset(joint_position)                       # (S,) = (9,) at the episode's first tick
    arm, gripper = selector.select_action(tick, joint_position, instruction, images)  # every tick

`images` is {camera: (H, W, 3) uint8} on camera ticks and None otherwise. A caller that
computes chunks asynchronously uses the parts instead of `select_action`:

    selector.expect(c)                          # inference on tick c's pair has started
    selector.add_chunk(c, actions)              # ... and finished: usable from c + latency_ticks
    selector.add_chunk(c, actions, usable_tick=c)  # realtime: usable as soon as it exists
    selector.awaiting(tick)                     # a chunk due by `tick` is still being computed
    arm, gripper = selector.command(tick)

The hold: until the first usable chunk covers a tick, and whenever none covers it (the
ensembler's chunks have all expired), the selector returns the last command it issued, or
the pose it was reset with before any. `diagnostics()` gathers every stage's own.

Not thread-safe: policy_node calls it with its lock held.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from arm_act.policy.latency_gate import LatencyGate
from arm_act.policy.runtime import ARM_JOINTS, GRIPPER_RANGE, ChunkPrediction, CommandLimiter


class GraspAssist(Protocol):
    """What ActionSelector asks of the optional grasp assist (arm_act.assist.aim.AimCorrector
    is the one there is): the network's own modules never import the hand-written ones."""

    retrying: bool  # its reflex drives the arm, the chunks wait

    def reset(self) -> None: ...
    def missed(self, gripper: float, fingers: float) -> bool: ...
    def start_retry(self, arm: np.ndarray) -> None: ...
    def retry_step(self, targets: list, measured: np.ndarray | None) -> tuple[np.ndarray, float, bool]: ...
    def observe(self, target: np.ndarray | None) -> None: ...
    def correct(self, arm: np.ndarray, gripper: float) -> np.ndarray: ...
    def diagnostics(self) -> dict: ...


class ActionSelector:
    """Chunks in, one command per control tick out; see the module docstring."""

    def __init__(self, runtime, latency_ticks: int, limiter: CommandLimiter, aim: GraspAssist | None = None):
        """runtime: a PolicyRuntime (predict_chunk, and its chunk executor: reset, add_chunk, action).
        aim: the grasp assist between the executor and the limiter (arm_act.assist), or None."""
        self.gate = LatencyGate(latency_ticks)
        self.runtime = runtime
        self.aim = aim
        self.limiter = limiter
        self.held: tuple[np.ndarray, float] | None = None  # the command returned while no chunk covers a tick
        self.holding = True  # whether the last command was the hold
        self.started = False  # whether a chunk's action has been issued since reset
        self.last_start_tick = -1  # the start tick of the newest chunk handed to the executor
        self.last_prediction: ChunkPrediction | None = None  # from select_action's last inference
        self.conditioned_on: str | None = None  # the instruction of the last chunk taken this episode

    @property
    def latency_ticks(self) -> int:
        return self.gate.latency_ticks

    def reset(self, joint_position: np.ndarray) -> None:
        """A new episode starts at the measured pose joint_position (S,): every stage starts
        afresh and the hold is that pose."""
        position = np.asarray(joint_position, dtype=np.float64)
        self.gate.reset()
        self.runtime.reset()
        self.held = (position[:ARM_JOINTS].copy(), float(position[ARM_JOINTS]))
        self.holding, self.started, self.last_start_tick = True, False, -1
        self.last_prediction = self.conditioned_on = None
        self.limiter.reset(position[:ARM_JOINTS])
        if self.aim is not None:
            self.aim.reset()

    def new_goal(self, drop: bool = True) -> None:
        """The instruction changed: with drop, the chunks of the old goal go (the executor's
        and those still in the latency gate), so the new goal's first chunk drives alone, and
        the ensembling weighs chunks by the runtime's m_after_change until the episode ends;
        the arm holds its last command until it is due. The limiter and the grasp assist
        keep their state: the arm has not moved."""
        if drop:
            self.gate.reset()
            self.runtime.new_goal()

    # ------------------------------------------------------------ the latency gate
    def usable_tick(self, start_tick: int) -> int:
        return self.gate.usable_tick(start_tick)

    def expect(self, start_tick: int) -> None:
        self.gate.expect(start_tick)

    def forget(self, start_tick: int) -> None:
        self.gate.forget(start_tick)

    def is_known(self, start_tick: int) -> bool:
        return self.gate.is_known(start_tick)

    def awaiting(self, tick: int) -> bool:
        return self.gate.awaiting(tick)

    def add_chunk(self, start_tick: int, actions: np.ndarray, usable_tick: int | None = None,
                  target: np.ndarray | None = None) -> None:
        """The chunk (K, A) computed from the pair of `start_tick`, usable from `usable_tick`
        (default: the latency rule); `target` is the same inference's target estimate (3,),
        which reaches the grasp assist with the chunk."""
        self.gate.add(start_tick, actions, target, usable_tick)

    # ------------------------------------------------------------ commands
    def command(self, tick: int, joint_position: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """(arm (7,), gripper) for `tick`: the executor's action over every chunk usable by
        now, through the grasp assist and the limiter, else the hold. joint_position (S,),
        the measured state, lets the grasp check see a grasp that closed on nothing."""
        if self.held is None:
            raise RuntimeError("ActionSelector.command before reset(joint_position)")
        if (self.aim is not None and joint_position is not None
                and self.aim.missed(self.held[1], float(np.asarray(joint_position)[ARM_JOINTS]))):
            self._reopen(tick)
        due = self.gate.due(tick)
        if self.aim is not None and self.aim.retrying:
            return self._retry(tick, due, joint_position)
        for chunk in due:
            self.runtime.add_chunk(chunk.start, chunk.actions)
            self.last_start_tick = max(self.last_start_tick, chunk.start)
            if self.aim is not None:
                self.aim.observe(chunk.target)
        action = self.runtime.action(tick)
        self.holding = action is None
        if action is not None:
            arm, gripper = action
            if self.aim is not None:
                arm = self.aim.correct(arm, gripper)
            self.held = self.limiter(arm, gripper)
            self.started = True
        arm, gripper = self.held
        return arm.copy(), gripper

    def _retry(self, tick: int, due: list, joint_position: np.ndarray | None) -> tuple[np.ndarray, float]:
        """A tick of the re-grasp reflex: the due chunks' targets feed its aim, their actions
        are dropped. When it has closed the fingers, the chunks of camera pairs from the next
        tick on drive again (the arm holds until the first is usable)."""
        measured = None if joint_position is None else np.asarray(joint_position, dtype=np.float64)[:ARM_JOINTS]
        arm, gripper, finished = self.aim.retry_step([chunk.target for chunk in due], measured)
        self.held = self.limiter(arm, gripper)
        self.holding, self.started = False, True
        if finished:
            self.runtime.reset()
            self.gate.drop_until(tick)
        arm, gripper = self.held
        return arm.copy(), gripper

    def _reopen(self, tick: int) -> None:
        """The grasp closed on nothing: open the gripper, and drop every chunk computed up to
        now, since they carry on with that grasp (lift, carry). The arm holds its last
        command until the chunk of the next camera pair, which sees the open fingers; the
        assist aims that grasp afresh (or its reflex retries)."""
        self.runtime.reset()
        self.gate.drop_until(tick)
        arm, _ = self.held
        self.held = self.limiter(arm, GRIPPER_RANGE[1])
        self.aim.start_retry(arm)

    def select_action(self, tick: int, joint_position: np.ndarray, instruction: str,
                      images: dict[str, np.ndarray] | None = None, need_attention: bool = False,
                      ) -> tuple[np.ndarray, float]:
        """The synchronous door: on a camera tick (images {camera: (H, W, 3) uint8}) infer a
        chunk from the pair and joint_position (S,), usable from tick + latency_ticks (kept in
        `last_prediction`); then the command for `tick`. The first pair under a new
        instruction drops the old goal's chunks (new_goal), as policy_node does."""
        if images is not None:
            if instruction != self.conditioned_on:
                if self.conditioned_on is not None:
                    self.new_goal()
                self.conditioned_on = instruction
            self.last_prediction = self.runtime.predict_chunk(images, joint_position, instruction,
                                                              need_attention=need_attention)
            self.add_chunk(tick, self.last_prediction.actions, target=self.last_prediction.target)
        return self.command(tick, joint_position)

    def diagnostics(self) -> dict:
        """Every stage's state: the gate's chunks, the limiter's clamps, the assist's work."""
        out = {**self.gate.diagnostics(), **self.limiter.diagnostics(), "holding": self.holding,
               "last_chunk_tick": self.last_start_tick}
        if self.aim is not None:
            out.update(self.aim.diagnostics())
        return out
