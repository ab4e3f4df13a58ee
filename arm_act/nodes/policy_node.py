"""policy_node: the trained transformer policy as a managed (lifecycle) ROS 2 controller.

Keeps the latest observation (both cameras, joint states, task, episode), runs inference on
a worker thread for each new camera pair, and publishes arm/gripper commands from the chunk
executor (temporal ensembling or queue) at the control rate on sim time. The control tick
(driven by /clock, see ControllerNode) never waits for inference: it only reads the chunks
the worker has finished (docs/architecture.md, "Threading").

Lifecycle (docs/ros.md has the table): configure loads and checks the checkpoint (a bad one
fails the transition, the reason in the log and policy/diagnostics' `last_error`); activate
commands from the measured pose; deactivate holds the arm where it is; cleanup releases the
model. With `autostart` (default true) the node configures and activates itself, so
`ros2 run arm_act policy_node` just works; launch files drive the transitions themselves.

Safety: stale observations (`stale_timeout`), a failed inference or an instruction it cannot
read make the node hold and say so in policy/diagnostics. Every command is clamped to the
joint limits and a maximum joint speed; a message the node cannot use is rejected with a
throttled warning naming it (arm_act.nodes.guard).

Its parts live beside it: ObservationSync (cameras and joint states matched by stamp),
InferenceWorker (the inference thread), PolicyStats (counters, diagnostics), ChunkOutputs
(the per-chunk topics), policy_parameters (declarations, when each may change).
"""
from __future__ import annotations

import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image
from std_srvs.srv import Trigger

from arm_act.common import realtime
from arm_act.nodes import policy_parameters as params
from arm_act.nodes.chunk_outputs import ChunkOutputs
from arm_act.nodes.controller import MAX_FUTURE_S, ControllerNode
from arm_act.nodes.guard import guarded, rejections
from arm_act.nodes.inference_worker import InferenceWorker, Job
from arm_act.nodes.instruction_check import InstructionCheck, RefusalLog
from arm_act.nodes.observation_sync import ObservationSync
from arm_act.nodes.policy_stats import PolicyStats, diagnostic_array, lifecycle_waits, node_input
from arm_act.nodes.silent_inputs import SilentInputs
from arm_act.policy.runtime import PolicyRuntime
from arm_act.policy.selection import ActionSelector
from arm_act.ros import conversions as conv
from arm_act.ros.qos import SENSOR_DATA


class PolicyNode(ControllerNode, LifecycleNode):
    realtime_process = True  # its executable gets arm_act/common/realtime.py's settings

    def __init__(self, runtime: PolicyRuntime | None = None, **kwargs):
        super().__init__("policy_node", **kwargs)
        params.declare_parameters(self)
        self.thread_priority, self.inference_priority = params.read_scheduling(self, self.mode == "realtime")
        self.stale_timeout_ns = int(float(self.get_parameter("stale_timeout").value) * 1e9)
        self._given_runtime = runtime
        self.runtime: PolicyRuntime | None = None
        self.selector: ActionSelector | None = None
        self.lifecycle_state = self.state = "unconfigured"
        self.last_error = ""
        self.enabled = True
        self.hold_pose: tuple[np.ndarray, float] | None = None  # inactive: the pose the arm holds
        self.check: InstructionCheck | None = None  # configured: what the checkpoint can read
        self.stats = PolicyStats(self.control_rate)
        self.refusals = RefusalLog(self.get_logger(), self.stats)
        self._create_interfaces()
        self.worker = InferenceWorker(self.inference_priority, self.get_logger())
        self.add_on_set_parameters_callback(lambda parameters: params.on_set_parameters(self, parameters))
        if self.get_parameter("autostart").value:
            if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                self.trigger_activate()
        # The executable constructs the node on the thread that then spins it (node_main): the
        # control tick's thread. On SCHED_FIFO only now, after the model loaded (seconds of CPU).
        realtime.realtime_thread(self.thread_priority, "control tick (executor thread)", self.get_logger(),
                                 reception_threads=True)

    def _create_interfaces(self) -> None:
        """Camera subscriptions, the chunk, attention and diagnostics publishers, services."""
        p = self.get_parameter
        # The cameras are the shipped policy's (front, wrist); configure checks that the
        # checkpoint wants exactly these.
        self.camera_topics = {"front": str(p("front_topic").value), "wrist": str(p("wrist_topic").value)}
        self.sync = ObservationSync(tuple(self.camera_topics), self.mode == "realtime", MAX_FUTURE_S)
        self.cameras_in = SilentInputs(self, lambda: [
            self.create_subscription(Image, topic, lambda msg, c=camera: self.image_callback(c, msg), SENSOR_DATA)
            for camera, topic in self.camera_topics.items()], float(p("image_timeout").value), "camera images")
        self.outputs = ChunkOutputs(self, self.control_rate)
        self.publish_attention = bool(p("publish_attention").value)
        self.diag_pub = self.create_publisher(DiagnosticArray, "policy/diagnostics", 10)
        self.create_service(Trigger, "~/enable", lambda _, response: self._set_enabled(True, response))
        self.create_service(Trigger, "~/disable", lambda _, response: self._set_enabled(False, response))
        # Wall clock: diagnostics also go out (and say what is missing) when no /clock comes.
        self.create_timer(0.5, self.publish_diagnostics, clock=self._steady)

    # ------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        try:
            runtime, selector = params.load_policy(self, self._given_runtime, self.camera_topics)
        except Exception as exc:  # noqa: BLE001 - any reason a checkpoint cannot be used fails the transition
            self.last_error = f"configure failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(f"{self.last_error}; staying unconfigured")
            return TransitionCallbackReturn.FAILURE
        self.publish_attention = bool(self.get_parameter("publish_attention").value)
        with self.lock:
            self.runtime, self.selector = runtime, selector
            self.check = InstructionCheck(runtime.config.vocab, runtime.config.max_instruction_tokens)
            self.sync.configure(tuple(runtime.config.cameras), runtime.config.image_size)
            self.last_error = ""
            self.lifecycle_state = self.state = "inactive"
            self._active_episode = None
        self.worker.start(runtime, self._on_chunk, self._on_inference_failure, self.publish_attention)
        realtime.settle()  # policy_node as an executable: freeze the heap with the model loaded
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.lock:
            self.lifecycle_state = self.state = "active"
            self.hold_pose = None
            self._active_episode = None  # the next tick starts afresh from the measured pose
        self.get_logger().info("active: commanding the arm")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        with self.lock:
            self.lifecycle_state = self.state = "inactive"
            # The measured pose, as ros2_control holds on deactivation (docs/ros.md, "policy_node is a managed node").
            q = self.joint_positions
            self.hold_pose = None if q is None else (q[:7].copy(), float(q[7]))
            self.last_command = self.hold_pose
        self.get_logger().info("inactive: the arm holds where it is")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.worker.stop()
        with self.lock:
            self.runtime = self.selector = self.check = None
            self.hold_pose = None
            self.lifecycle_state = self.state = "unconfigured"
            self.worker.drain()
        self.get_logger().info("unconfigured: the model is released")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.on_cleanup(state)
        self.lifecycle_state = self.state = "finalized"
        return TransitionCallbackReturn.SUCCESS

    on_error = on_cleanup  # an error in a transition: release the model, back to unconfigured

    # ------------------------------------------------------------ inputs
    @guarded("{0} image")
    def image_callback(self, camera: str, msg: Image) -> None:
        self.cameras_in.received()
        try:
            stamp, rgb = self.sync.decode(camera, msg, self._clock_ns)
        except conv.ConversionError:
            self.stats["rejected_images"] += 1
            raise
        with self.lock:
            if self.sync.add_image(camera, stamp, rgb):  # a new complete camera pair
                self._submit_realtime()
        self.try_lockstep_tick()

    def joint_state_callback(self, msg) -> None:
        super().joint_state_callback(msg)
        with self.lock:
            self.sync.add_joints(self.joint_stamp_ns, self.joint_positions)
            self._start_episode_realtime()
            self._submit_realtime()

    def episode_callback(self, msg) -> None:
        super().episode_callback(msg)
        with self.lock:
            self._start_episode_realtime()
            self._submit_realtime()

    def on_clock_reset(self, now_ns: int) -> None:
        """Sim time went back (lock held): the observations of the old timeline go; the chunks
        go at the new episode's start (_start_episode_realtime)."""
        self.sync.clock_reset(now_ns)

    # ------------------------------------------------------------ realtime: episodes and camera pairs
    def _start_episode_realtime(self) -> bool:
        """Realtime (lock held): whether the selector has been reset for the running episode,
        resetting it once a joint state of that episode is here (ObservationSync.start_episode).
        Chunks and inferences of the previous episode are dropped."""
        before = self.sync.started_episode
        started = self.sync.start_episode(self.episode, self.joint_positions, self.joint_stamp_ns, self.selector)
        if self.sync.started_episode != before and self.lifecycle_state == "active":
            self.last_command = None  # started just now: from the episode's pose, not the last command
        return started

    def _submit_realtime(self) -> None:
        """Realtime: infer on the newest complete camera pair once the joint state of its
        tick (or a later one) is here too (lock held). Submitting on the images alone could
        pair them with the previous tick's joints: in-process evaluation and lockstep never do
        that (docs/architecture.md, "Threading")."""
        pair = self.sync.pair_due(self.joint_stamp_ns)
        if pair is None:
            return
        info = self.episode_for(pair)
        if info is None or not self._start_episode_realtime() or info.episode != self.sync.started_episode:
            return  # the pair's episode has not started here yet (its joint state or message is on its way)
        joints = self.sync.take_pair(pair)  # the joint state of the pair's own tick, if it came
        if joints is None:
            self.stats["pairs_joint_mismatch"] += 1
        self._submit(pair, joints=joints)

    # ------------------------------------------------------------ inference
    def _submit(self, stamp_ns: int, tick: int | None = None, joints: np.ndarray | None = None) -> None:
        """Hand the camera pair of `stamp_ns` to the worker (lock held), with `joints` or the
        newest joint state, while active and once everything the policy reads is here."""
        info = self.episode_for(stamp_ns)
        if (self.selector is None or self.lifecycle_state != "active" or self.joint_positions is None
                or info is None or not self.sync.sized_for_policy()):
            return  # sized_for_policy: not for images received before configure knew the policy's size
        words = self._readable_instruction()
        if words is None:
            return  # no instruction yet, or refused
        self.worker.submit(Job(info.episode, tick if tick is not None else info.tick_of(stamp_ns), stamp_ns,
                               self.sync.pair_images(), (self.joint_positions if joints is None else joints).copy(),
                               words), self.selector)

    def _readable_instruction(self) -> str | None:
        """(lock held) The running instruction's words for the network, or None: none yet, or
        refused (instruction_check.py; the reason in self.refusals.reason)."""
        return self.refusals.words(self.check, self.instruction, None if self.episode is None else self.episode.colours)

    def _on_chunk(self, job: Job, pred, started: float, runtime, stop) -> bool:
        """The worker's chunk (on its thread): to the selector and policy/action_chunk, unless
        its episode has ended; False once the node was cleaned up meanwhile."""
        with self.lock:
            selector = self.selector
            if stop.is_set() or selector is None or runtime is not self.runtime:
                return False  # nothing of this node is used any more
            if self.sync.chunk_ended(job.episode, self.episode) or job.instruction != self._readable_instruction():
                selector.forget(job.tick)  # its episode ended, or the goal changed since its pair
                self.stats["stale_chunks_dropped"] += 1
                return True
            if job.instruction != selector.conditioned_on:  # the first chunk of a new goal: the old ones go
                selector.new_goal(selector.conditioned_on is not None)  # None: the episode's first goal
                selector.conditioned_on = job.instruction
            # Everything the worker spent on the pair (preprocessing included).
            self.stats.chunk_added((time.perf_counter() - started) * 1e3, pred.target)
            selector.add_chunk(job.tick, pred.actions, usable_tick=self.sync.usable_tick(job.tick),
                               target=pred.target)
            if self.mode == "realtime" and self._last_tick_index is not None:
                # The first tick to use it: the one now due (waiting for its joint state), else the next.
                index = self._last_tick_index + (0 if self._due_ns is not None else 1)
                self.stats.chunk_timed(self.episode.tick_of(index * 1_000_000_000 // self.control_rate) - job.tick)
            # Publishing under the lock: destroy_node takes the lock before the publishers go.
            if not stop.is_set():
                self.outputs.publish(job.stamp_ns, pred, self.sync.cameras)
        self.try_lockstep_tick()
        return True

    def _on_inference_failure(self, job: Job, exc: Exception) -> None:
        """A failed inference (the worker's thread): hold and report, never crash the node."""
        with self.lock:
            self.stats["inference_failures"] += 1
            self.state = "inference_failed"
            if self.selector is not None:
                self.selector.forget(job.tick)
        rejections(self).reject("inference", f"{exc!r}; holding")

    # ------------------------------------------------------------ control
    def observation_complete(self, stamp_ns: int, tick: int) -> bool:
        if not super().observation_complete(stamp_ns, tick):
            return False
        if self.selector is None or self.lifecycle_state != "active":
            return True  # unconfigured or inactive: the hold needs only the joint state
        return self.sync.tick_complete(stamp_ns, tick, self.episode.is_camera_tick(tick), self.selector,
                                       self._submit)

    def on_new_episode(self, info: conv.EpisodeInfo) -> None:
        if self.mode == "realtime":
            self._start_episode_realtime()  # from a joint state of this episode (or later)
        else:  # lockstep: this tick's joint state is the episode's first
            if self.selector is not None:
                self.selector.reset(self.joint_positions)
            if self.lifecycle_state == "active":
                self.last_command = None
        self.get_logger().info(f"episode {info.episode}: {info.instruction}")

    def compute_command(self, stamp_ns: int, tick: int):
        if self.lifecycle_state == "inactive" and self.hold_pose is not None:
            self.state = "inactive"
            return self.hold_pose
        if self.selector is None or self.lifecycle_state != "active":
            self.state = self.lifecycle_state
            return None
        if not self.enabled:
            self.state = "disabled"
            return None
        if self._readable_instruction() is None and self.refusals.reason:
            self.state = "refused"
            return self.hold_command()  # never a guess: the last command, else the measured pose
        selector = self.selector
        if self.mode == "realtime":
            self.stats.check_deadline()
            if not self._start_episode_realtime():
                self.state = "waiting"
                return None  # no joint state of this episode yet: the sim holds its reset pose
            if self.sync.stale(stamp_ns, self.joint_stamp_ns, self.stale_timeout_ns):
                self.state = "stale"
                self.stats["stale_ticks"] += 1
                return selector.held if selector.started else None
        command = selector.command(tick, self.joint_positions)  # the measured fingers: the grasp check
        if selector.holding:
            self.state = "waiting"
            # Realtime publishes nothing before the first chunk; lockstep answers every tick.
            return command if selector.started or self.mode == "lockstep" else None
        self.stats["ticks_without_chunk"] = max(0, tick - selector.last_start_tick)
        self.state = "ok" if self.state != "inference_failed" or self.stats.chunks else self.state
        return command

    def waiting_for(self) -> list[str]:
        missing = super().waiting_for()
        for camera, topic in self.camera_topics.items():
            if camera not in self.sync.images:
                missing.append(f"{camera} camera images on {self.resolve_topic_name(topic)}")
        return missing + lifecycle_waits(self.lifecycle_state, self.get_fully_qualified_name(), self.last_error)

    # ------------------------------------------------------------ services and diagnostics
    def _set_enabled(self, enabled: bool, response):
        """~/enable and ~/disable: while disabled, no commands are published."""
        self.enabled = enabled
        response.success, response.message = True, "enabled" if enabled else "disabled: no commands are published"
        return response

    def publish_diagnostics(self) -> None:
        joints = self._joint_in  # (stamp, system-clock ns of the callback) of the newest joint state
        self.cameras_in.check(joints is not None and time.time_ns() - joints[1] < 1_000_000_000)
        with self.lock:
            self.waiting = self.waiting_for()
            values = self.stats.diagnostic_values(node_input(self, self.get_clock().now().nanoseconds))
        self.diag_pub.publish(diagnostic_array(values, self.waiting, self.get_clock().now().to_msg()))

    def destroy_node(self):
        self.worker.stop()
        with self.lock:  # a worker that outlived the join publishes only with this lock held
            return super().destroy_node()


def main(args=None):
    from arm_act.ros.node_main import spin_node

    spin_node(PolicyNode, args)


if __name__ == "__main__":
    main()
