"""ActionSelector: the one door from observations to commands (LeRobot's `select_action`).

policy_node (lockstep and realtime), in-process evaluation (arm_act.eval.in_process.PolicyAgent)
and takeover collection (TakeoverAgent, `arm-act collect --policy`) all turn chunks into
commands here, so the latency rule, the chunk executor, the aim correction and its grasp
check (arm_act.policy.aim, optional), the command limiter and the hold exist once:

    selector = ActionSelector(runtime, latency_ticks=1, limiter=CommandLimiter(3.0, 50.0),
                              aim=panda_aim(50.0))   # arm_act.common.aim; None: no correction
    selector.reset(joint_position)                       # (S,) = (9,) at the episode's first tick
    arm, gripper = selector.select_action(tick, joint_position, instruction, images)  # every tick

`images` is {camera: (H, W, 3) uint8} on camera ticks and None otherwise. `arm` is (7,) joint
positions (rad), `gripper` the finger opening (m).

The latency rule: a chunk (K, A) computed from the camera pair of tick c holds the actions
for ticks c .. c+K-1 and is usable from tick c + latency_ticks; until then the chunks
before it keep driving the arm (its first latency_ticks actions are simply in the past).
Counting the delay in ticks, not measuring it per call, makes an episode the same on any
machine and over ROS in lockstep. A caller that computes chunks asynchronously uses the
parts instead of `select_action`:

    selector.expect(c)                          # inference on tick c's pair has started
    selector.add_chunk(c, actions)              # ... and finished: usable from c + latency_ticks
    selector.add_chunk(c, actions, usable_tick=c)  # realtime: usable as soon as it exists
    selector.awaiting(tick)                     # a chunk due by `tick` is still being computed
    arm, gripper = selector.command(tick)

The hold: until the first usable chunk covers a tick, and whenever none covers it (the
ensembler's chunks have all expired), the selector returns the last command it issued, or
the pose it was reset with before any. Every command goes through the CommandLimiter
(joint limits, maximum joint speed from the previous command).

Not thread-safe: policy_node calls it with its lock held.
"""
from __future__ import annotations

import numpy as np

from arm_act.policy.aim import AimCorrector
from arm_act.policy.runtime import ARM_JOINTS, GRIPPER_RANGE, ChunkPrediction, CommandLimiter


class ActionSelector:
    """Chunks in, one command per control tick out; see the module docstring."""

    def __init__(self, runtime, latency_ticks: int, limiter: CommandLimiter, aim: AimCorrector | None = None):
        """runtime: a PolicyRuntime (predict_chunk, and its chunk executor: reset, add_chunk, action).
        aim: the aim correction between the executor and the limiter (arm_act.policy.aim), or None."""
        if latency_ticks < 0:
            raise ValueError(f"latency_ticks={latency_ticks} must be >= 0")
        self.runtime = runtime
        self.latency_ticks = int(latency_ticks)
        self.limiter = limiter
        self.aim = aim
        # (usable tick, start tick, (K, A), target estimate (3,) or None), not yet executed
        self._ready: list[tuple[int, int, np.ndarray, np.ndarray | None]] = []
        self._expected: set[int] = set()  # start ticks whose chunk is being computed
        self.held: tuple[np.ndarray, float] | None = None  # the command returned while no chunk covers a tick
        self.holding = True  # whether the last command was the hold
        self.started = False  # whether a chunk's action has been issued since reset
        self.last_start_tick = -1  # the start tick of the newest chunk handed to the executor
        self.last_prediction: ChunkPrediction | None = None  # from select_action's last inference
        self._drop_before = -1  # chunks from pairs before this tick are dropped (after a missed grasp)

    def reset(self, joint_position: np.ndarray) -> None:
        """A new episode starts at the measured pose joint_position (S,): forget every chunk.
        Inferences already under way stay expected (policy_node starts the first one on the
        tick that also starts the episode); their caller `forget`s those that end up unused."""
        position = np.asarray(joint_position, dtype=np.float64)
        self.runtime.reset()
        self._ready.clear()
        self.held = (position[:ARM_JOINTS].copy(), float(position[ARM_JOINTS]))
        self.holding, self.started, self.last_start_tick = True, False, -1
        self.last_prediction = None
        self._drop_before = -1
        self.limiter.reset(position[:ARM_JOINTS])
        if self.aim is not None:
            self.aim.reset()

    # ------------------------------------------------------------ the latency rule
    def usable_tick(self, start_tick: int) -> int:
        """The first tick at which the chunk computed from tick `start_tick`'s pair may act."""
        return int(start_tick) + self.latency_ticks

    def expect(self, start_tick: int) -> None:
        """Inference on the pair of `start_tick` has started (see `awaiting`)."""
        self._expected.add(int(start_tick))

    def forget(self, start_tick: int) -> None:
        """That inference failed or was dropped: do not wait for it."""
        self._expected.discard(int(start_tick))

    def is_known(self, start_tick: int) -> bool:
        """A chunk from `start_tick` is being computed or waits to become usable."""
        return int(start_tick) in self._expected or any(item[1] == start_tick for item in self._ready)

    def awaiting(self, tick: int) -> bool:
        """Whether a chunk that is usable by `tick` is still being computed: lockstep waits for it."""
        return any(self.usable_tick(start) <= tick for start in self._expected)

    def add_chunk(self, start_tick: int, actions: np.ndarray, usable_tick: int | None = None,
                  target: np.ndarray | None = None) -> None:
        """The chunk (K, A) computed from the pair of `start_tick`, usable from `usable_tick`
        (default: the latency rule, start_tick + latency_ticks); `target` is the same
        inference's target estimate (3,), which reaches the aim correction with the chunk."""
        start = int(start_tick)
        self._expected.discard(start)
        if start < self._drop_before:
            return  # computed before a missed grasp was reopened: it carries on with that grasp
        usable = self.usable_tick(start) if usable_tick is None else int(usable_tick)
        self._ready.append((usable, start, np.asarray(actions), None if target is None else np.asarray(target)))

    # ------------------------------------------------------------ commands
    def command(self, tick: int, joint_position: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """(arm (7,), gripper) for `tick`: the executor's action over every chunk usable by
        now, aim-corrected, limited, else the hold. joint_position (S,), the measured state,
        lets the aim's grasp check see a grasp that closed on nothing (see `_reopen`)."""
        if (self.aim is not None and joint_position is not None and self.held is not None
                and self.aim.missed(self.held[1], float(np.asarray(joint_position)[ARM_JOINTS]))):
            self._reopen(tick)
        reflex = None if self.aim is None else self.aim.reflex
        due = sorted(((s, c, t) for u, s, c, t in self._ready if u <= tick), key=lambda item: item[0])
        self._ready = [item for item in self._ready if item[0] > tick]
        if reflex is not None and reflex.active:
            return self._retry(tick, reflex, [target for _, _, target in due], joint_position)
        for start, chunk, target in due:
            self.runtime.add_chunk(start, chunk)
            self.last_start_tick = max(self.last_start_tick, start)
            if self.aim is not None:
                self.aim.observe(target)
        action = self.runtime.action(tick)
        self.holding = action is None
        if action is not None:
            arm, gripper = action
            if self.aim is not None:
                arm = self.aim.correct(arm, gripper)
            self.held = self.limiter(arm, gripper)
            self.started = True
        if self.held is None:
            raise RuntimeError("ActionSelector.command before reset(joint_position)")
        arm, gripper = self.held
        return arm.copy(), gripper

    def _retry(self, tick: int, reflex, targets: list, joint_position: np.ndarray | None) -> tuple[np.ndarray, float]:
        """A tick of the re-grasp reflex (arm_act.policy.regrasp): the chunks' targets feed
        its aim, their actions wait. When it has closed the fingers, the chunks of camera
        pairs from the next tick on drive again (the arm holds until the first is usable)."""
        for target in targets:
            reflex.observe(target)
        measured = None if joint_position is None else np.asarray(joint_position, dtype=np.float64)[:ARM_JOINTS]
        arm, gripper = reflex.step(measured)
        self.held = self.limiter(arm, gripper)
        self.holding, self.started = False, True
        if not reflex.active:
            self.runtime.reset()
            self._ready.clear()
            self._drop_before = int(tick) + 1
            self.aim.handed_back()
        arm, gripper = self.held
        return arm.copy(), gripper

    def _reopen(self, tick: int) -> None:
        """The grasp closed on nothing: open the gripper, and drop every chunk computed
        before now, since they carry on with that grasp (lift, carry). The arm holds its
        last command until the chunk of the next camera pair, which sees the open fingers;
        the aim correction aims that grasp afresh."""
        self.runtime.reset()
        self._ready.clear()
        self._drop_before = int(tick) + 1  # this tick's own pair too: it still saw the closed fingers
        arm, _ = self.held
        self.held = self.limiter(arm, GRIPPER_RANGE[1])
        if self.aim is not None and self.aim.reflex is not None:
            self.aim.reflex.start(arm)

    def select_action(self, tick: int, joint_position: np.ndarray, instruction: str,
                      images: dict[str, np.ndarray] | None = None, need_attention: bool = False,
                      ) -> tuple[np.ndarray, float]:
        """The synchronous door: on a camera tick (images {camera: (H, W, 3) uint8}) infer a
        chunk from the pair and joint_position (S,), usable from tick + latency_ticks (kept in
        `last_prediction`); then the command for `tick`."""
        if images is not None:
            self.last_prediction = self.runtime.predict_chunk(images, joint_position, instruction,
                                                              need_attention=need_attention)
            self.add_chunk(tick, self.last_prediction.actions, target=self.last_prediction.target)
        return self.command(tick, joint_position)
