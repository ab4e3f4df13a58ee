"""ActionSelector: the one door from observations to commands (LeRobot's `select_action`).

policy_node (lockstep and realtime), in-process evaluation (arm_act.eval.in_process.PolicyAgent)
and takeover collection (TakeoverAgent, `arm-act collect --policy`) all turn chunks into
commands here, so the latency rule, the chunk executor, the command limiter and the hold
exist once:

    selector = ActionSelector(runtime, latency_ticks=1, limiter=CommandLimiter(3.0, 50.0))
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

from arm_act.policy.runtime import ARM_JOINTS, ChunkPrediction, CommandLimiter


class ActionSelector:
    """Chunks in, one command per control tick out; see the module docstring."""

    def __init__(self, runtime, latency_ticks: int, limiter: CommandLimiter):
        """runtime: a PolicyRuntime (predict_chunk, and its chunk executor: reset, add_chunk, action)."""
        if latency_ticks < 0:
            raise ValueError(f"latency_ticks={latency_ticks} must be >= 0")
        self.runtime = runtime
        self.latency_ticks = int(latency_ticks)
        self.limiter = limiter
        self._ready: list[tuple[int, int, np.ndarray]] = []  # (usable tick, start tick, (K, A)), not yet executed
        self._expected: set[int] = set()  # start ticks whose chunk is being computed
        self.held: tuple[np.ndarray, float] | None = None  # the command returned while no chunk covers a tick
        self.holding = True  # whether the last command was the hold
        self.started = False  # whether a chunk's action has been issued since reset
        self.last_start_tick = -1  # the start tick of the newest chunk handed to the executor
        self.last_prediction: ChunkPrediction | None = None  # from select_action's last inference

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
        self.limiter.reset(position[:ARM_JOINTS])

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
        return int(start_tick) in self._expected or any(s == start_tick for _, s, _ in self._ready)

    def awaiting(self, tick: int) -> bool:
        """Whether a chunk that is usable by `tick` is still being computed: lockstep waits for it."""
        return any(self.usable_tick(start) <= tick for start in self._expected)

    def add_chunk(self, start_tick: int, actions: np.ndarray, usable_tick: int | None = None) -> None:
        """The chunk (K, A) computed from the pair of `start_tick`, usable from `usable_tick`
        (default: the latency rule, start_tick + latency_ticks)."""
        start = int(start_tick)
        self._expected.discard(start)
        usable = self.usable_tick(start) if usable_tick is None else int(usable_tick)
        self._ready.append((usable, start, np.asarray(actions)))

    # ------------------------------------------------------------ commands
    def command(self, tick: int) -> tuple[np.ndarray, float]:
        """(arm (7,), gripper) for `tick`: the executor's action over every chunk usable by
        now, limited, else the hold."""
        due = sorted(((s, c) for u, s, c in self._ready if u <= tick), key=lambda item: item[0])
        self._ready = [item for item in self._ready if item[0] > tick]
        for start, chunk in due:
            self.runtime.add_chunk(start, chunk)
            self.last_start_tick = max(self.last_start_tick, start)
        action = self.runtime.action(tick)
        self.holding = action is None
        if action is not None:
            self.held = self.limiter(*action)
            self.started = True
        if self.held is None:
            raise RuntimeError("ActionSelector.command before reset(joint_position)")
        arm, gripper = self.held
        return arm.copy(), gripper

    def select_action(self, tick: int, joint_position: np.ndarray, instruction: str,
                      images: dict[str, np.ndarray] | None = None, need_attention: bool = False,
                      ) -> tuple[np.ndarray, float]:
        """The synchronous door: on a camera tick (images {camera: (H, W, 3) uint8}) infer a
        chunk from the pair and joint_position (S,), usable from tick + latency_ticks (kept in
        `last_prediction`); then the command for `tick`."""
        if images is not None:
            self.last_prediction = self.runtime.predict_chunk(images, joint_position, instruction,
                                                              need_attention=need_attention)
            self.add_chunk(tick, self.last_prediction.actions)
        return self.command(tick)
