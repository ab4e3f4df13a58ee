"""policy_node: the trained transformer policy as a managed (lifecycle) ROS 2 controller.

Keeps the latest observation (both cameras, joint states, task, episode), runs inference on
a worker thread for each new camera pair, and publishes arm/gripper commands from the chunk
executor (temporal ensembling or queue) at the control rate on sim time. The control tick
(driven by /clock, see ControllerNode) never waits for inference: it only reads the chunks
the worker has finished (docs/architecture.md, "Threading").

Lifecycle (rclpy.lifecycle; `ros2 lifecycle set /policy_node <transition>` or the
lifecycle_msgs services under policy_node/):
  unconfigured --configure--> inactive: loads the checkpoint and checks it against the node's
      cameras; a bad checkpoint fails the transition with the reason in the log and in
      policy/diagnostics (`last_error`), and the node stays alive, unconfigured.
  inactive --activate--> active: commands from the next control tick on, starting from the
      measured pose (the chunk executor starts empty).
  active --deactivate--> inactive: the arm holds where it is (every control tick commands
      the pose measured at the deactivation).
  inactive --cleanup--> unconfigured: the model, its worker thread and its chunks are released.
With `autostart` (default true) the node configures and activates itself, so `ros2 run
arm_act policy_node` just works; launch files drive the transitions themselves with
autostart:=false.

Parameters that change live (`ros2 param set`): execution, ensemble_m, stale_timeout,
max_joint_speed; bad values are refused with the reason. checkpoint, backend, torch_threads,
device, latency_ticks, assist, regrasps, regrasp_retry and publish_attention are read at
configure (set them while unconfigured). assist (default false: the network alone) runs the
hand-written layers around the network: colour balance of the images (arm_act/policy/colour.py),
the aim correction that steers the grasp onto the target head's estimate of the named block,
and a grasp check that reopens up to `regrasps` (default 3) grasps an episode that closed on
nothing (arm_act/assist/aim.py), each retried by the re-grasp reflex (regrasp_retry "reflex",
arm_act/assist/regrasp.py) or by the chunks ("policy"). device: cpu
(default), auto, cuda or cuda:N for the torch model (policy/device.py); a device that is not
there fails the configure transition with the reason.

Safety: observations older than `stale_timeout` (sim seconds) or a failed inference make the
node hold the last command and say so in policy/diagnostics; it resumes with fresh data.
Every command is clamped to the joint limits and a maximum joint speed; a message the node
cannot use (any input) is rejected with a throttled warning naming it (arm_act.nodes.guard).
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import cv2
import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from sensor_msgs.msg import Image
from std_msgs.msg import Float32MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from arm_act.assist.panda import panda_aim
from arm_act.common import realtime
from arm_act.common.paths import default_checkpoint
from arm_act.nodes.controller import MAX_FUTURE_S, ControllerNode
from arm_act.nodes.guard import guarded, rejections
from arm_act.nodes.scheduling import (
    AUTOMATIC_PRIORITY,
    gc_values,
    inference_priority_for,
    lock_memory_descriptor,
    normal_when_unpaced,
    read_priority,
    thread_priority_descriptor,
)
from arm_act.policy.inference_config import InferenceConfig, describe_range, meta_name
from arm_act.policy.inference_config import fields as inference_fields
from arm_act.policy.runtime import BACKENDS, CommandLimiter, PolicyRuntime, make_executor
from arm_act.policy.selection import ActionSelector
from arm_act.ros import conversions as conv
from arm_act.ros.qos import SENSOR_DATA

# Parameters applied to the running policy by the on-set-parameters callback.
LIVE_PARAMETERS = tuple(meta_name(f) for f in inference_fields() if f.metadata["live"])
# Parameters read at configure: they may change only while unconfigured.
CONFIGURE_PARAMETERS = ("checkpoint", "backend", "torch_threads", "device", "latency_ticks", "assist",
                        "regrasps", "regrasp_retry", "publish_attention")
# Fixed when the node is created.
FIXED_PARAMETERS = ("mode", "control_rate", "front_topic", "wrist_topic", "autostart", "thread_priority",
                    "inference_thread_priority", "lock_memory")
MAX_IMAGE_PIXELS = 4096 * 4096
JOINT_HISTORY = 16  # realtime: joint states kept by stamp (0.16 s at 100 Hz) to pair camera pairs with


INFERENCE_PARAMETERS = {meta_name(f) for f in inference_fields()}


def check_live_value(name: str, value) -> str | None:
    """The reason a value of an inference parameter is refused (InferenceConfig's ranges), or
    None when it is fine or the parameter is not one of them."""
    return InferenceConfig.check(name, value) if name in INFERENCE_PARAMETERS else None


class PolicyNode(ControllerNode, LifecycleNode):
    realtime_process = True  # its executable gets arm_act/common/realtime.py's settings

    def __init__(self, runtime: PolicyRuntime | None = None, **kwargs):
        super().__init__("policy_node", **kwargs)
        self._declare_parameters()
        self._read_scheduling()
        self.stale_timeout_ns = int(float(self.get_parameter("stale_timeout").value) * 1e9)
        self._given_runtime = runtime
        self._init_state()
        self._create_interfaces()
        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._worker: threading.Thread | None = None
        self.add_on_set_parameters_callback(self._on_set_parameters)
        if self.get_parameter("autostart").value:
            if self.trigger_configure() == TransitionCallbackReturn.SUCCESS:
                self.trigger_activate()
        # The executable constructs the node on the thread that then spins it (node_main): the
        # control tick's thread. On SCHED_FIFO only now, after the model loaded (seconds of CPU).
        realtime.realtime_thread(self.thread_priority, "control tick (executor thread)", self.get_logger(),
                                 reception_threads=True)

    def _declare_parameters(self) -> None:
        declare = self.declare_parameter
        declare("checkpoint", "")
        # Every inference setting, with its one default, description and range, from
        # InferenceConfig (`ros2 param describe /policy_node assist` shows them).
        for f in inference_fields():
            declare(meta_name(f), f.default, ParameterDescriptor(
                description=f.metadata["help"], additional_constraints=describe_range(f)))
        declare("publish_attention", True)
        declare("front_topic", "camera/front/image_raw")
        declare("wrist_topic", "camera/wrist/image_raw")
        # Configure and activate at start-up (`ros2 run`, launch, a respawn); false: wait,
        # unconfigured, for `ros2 lifecycle set`.
        declare("autostart", True)
        # SCHED_FIFO priority of the control tick (the executor thread; ros2_control's
        # thread_priority, 0: normal), and of the inference thread (0: normal; else below the tick's).
        declare("thread_priority", realtime.DEFAULT_THREAD_PRIORITY,
                thread_priority_descriptor("the control tick (the executor thread)"))
        declare("inference_thread_priority", AUTOMATIC_PRIORITY,
                thread_priority_descriptor("the inference thread, below thread_priority; -1: thread_priority - 10",
                                           automatic=True))
        declare("lock_memory", realtime.DEFAULT_LOCK_MEMORY, lock_memory_descriptor())

    def _read_scheduling(self) -> None:
        """Thread priorities and memory locking (fixed at start), and the live parameters' values."""
        self.thread_priority = read_priority(self)
        self.inference_priority = read_priority(self, "inference_thread_priority",
                                                automatic=inference_priority_for(self.thread_priority))
        if self.inference_priority and self.inference_priority >= self.thread_priority:
            raise ValueError(f"inference_thread_priority {self.inference_priority} must be 0 or below "
                             f"thread_priority {self.thread_priority}: the control tick preempts inference")
        self.thread_priority, self.inference_priority = normal_when_unpaced(
            self, self.mode == "realtime", self.thread_priority, self.inference_priority)
        if self.mode == "realtime" and self.get_parameter("lock_memory").value:
            realtime.lock_process_memory(self.get_logger())  # before the model loads (MCL_FUTURE takes it too)
        for name in LIVE_PARAMETERS:
            reason = check_live_value(name, self.get_parameter(name).value)
            if reason:
                raise ValueError(reason)

    def _init_state(self) -> None:
        """Model, selector, the latest observations and the counters diagnostics report."""
        self.runtime: PolicyRuntime | None = None
        self.selector: ActionSelector | None = None
        self.lifecycle_state = "unconfigured"
        self.last_error = ""
        self.enabled = True
        self.hold_pose: tuple[np.ndarray, float] | None = None  # inactive: the pose the arm holds

        self.images: dict[str, tuple[int, np.ndarray]] = {}  # camera -> (stamp ns, (H, W, 3))
        self.last_pair_ns = -1  # the newest camera pair handed to inference
        self._pair_ns: int | None = None  # the newest complete camera pair received
        self.chunk_count = 0
        self.target_guess = None  # the target head's last guess (3,) m, when the policy has one
        self.stats = {"inference_ms": float("nan"), "deadline_misses": 0, "ticks_without_chunk": 0,
                      "inference_failures": 0, "rejected_images": 0,
                      # realtime: ticks held on stale observations; camera pairs inferred with a joint
                      # state of another tick; chunks of an ended episode, dropped
                      "stale_ticks": 0, "pairs_joint_mismatch": 0, "stale_chunks_dropped": 0,
                      # realtime: chunks and the sum of their latencies in control ticks (from the
                      # pair's tick to the first tick whose command can use them), and those
                      # later than 1 tick, the latency of the shipped in-process evaluation
                      "chunks_timed": 0, "chunk_latency_ticks": 0, "late_chunks": 0}
        self.state = "unconfigured"
        self._last_tick_wall: float | None = None
        self._submitted_ns = -1
        # Realtime: the joint states of the last few stamps (ns -> (9,)), so a camera pair is
        # inferred with the joint state of its own tick even when a later one came first; and
        # the episode the selector was last reset for (from a joint state of that episode).
        self._joint_history: dict[int, np.ndarray] = {}
        self._started_episode: int | None = None

    def _create_interfaces(self) -> None:
        """Camera subscriptions, the chunk, attention and diagnostics publishers, services."""

        def p(name):
            return self.get_parameter(name).value

        # The cameras are the shipped policy's (front, wrist); configure checks that the
        # checkpoint wants exactly these.
        self.camera_topics = {"front": str(p("front_topic")), "wrist": str(p("wrist_topic"))}
        self.cameras = tuple(self.camera_topics)
        self.image_size = None
        for camera, topic in self.camera_topics.items():
            self.create_subscription(Image, topic, lambda msg, c=camera: self.image_callback(c, msg),
                                     SENSOR_DATA)
        self.chunk_pub = self.create_publisher(JointTrajectory, "policy/action_chunk", 10)
        # For viewers: the mean cross-attention of the action queries over each camera's
        # patches (Float32MultiArray, dims camera x row x col), one per chunk.
        self.publish_attention = bool(p("publish_attention"))
        self.attention_pub = self.create_publisher(Float32MultiArray, "policy/attention", 10)
        self.diag_pub = self.create_publisher(DiagnosticArray, "policy/diagnostics", 10)
        self.create_service(Trigger, "~/enable", self.enable_callback)
        self.create_service(Trigger, "~/disable", self.disable_callback)
        # Wall clock: diagnostics also go out (and say what is missing) when no /clock comes.
        self.create_timer(0.5, self.publish_diagnostics, clock=self._steady)

    # ------------------------------------------------------------ lifecycle
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        def p(name):
            return self.get_parameter(name).value

        try:
            runtime = self._given_runtime
            if runtime is not None:  # its ensembling counts this node's ticks
                runtime.set_control_rate(self.control_rate)
            else:
                checkpoint = p("checkpoint") or str(default_checkpoint())
                if p("backend") not in BACKENDS:
                    raise ValueError(f"backend={p('backend')!r} must be one of {list(BACKENDS)}")
                runtime = PolicyRuntime.from_checkpoint(
                    Path(checkpoint), execution=str(p("execution")), m=float(p("ensemble_m")),
                    threads=int(p("torch_threads")), backend=str(p("backend")), device=str(p("device")),
                    control_rate=self.control_rate, colour_balance=bool(p("assist")),
                )
                self.get_logger().info(f"loaded {checkpoint} ({runtime.execution}, {runtime.backend} "
                                       f"backend{': ' + runtime.backend_note if runtime.backend_note else ''})")
            cameras = tuple(runtime.config.cameras)
            if set(cameras) != set(self.camera_topics):
                raise ValueError(f"the checkpoint's cameras {list(cameras)} are not this node's "
                                 f"{list(self.camera_topics)}")
            # Lockstep: a chunk from the camera pair of tick c is used from tick c+latency_ticks,
            # the rule in-process evaluation uses (the same ActionSelector), so both give the
            # same episodes. Realtime: a chunk is used as soon as its inference finishes.
            aim = (panda_aim(self.control_rate, int(p("regrasps")), str(p("regrasp_retry")))
                   if bool(p("assist")) else None)
            selector = ActionSelector(runtime, int(p("latency_ticks")),
                                      CommandLimiter(float(p("max_joint_speed")), self.control_rate), aim=aim)
        except Exception as exc:  # noqa: BLE001 - any reason a checkpoint cannot be used fails the transition
            self.last_error = f"configure failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(f"{self.last_error}; staying unconfigured")
            return TransitionCallbackReturn.FAILURE
        self.publish_attention = bool(p("publish_attention"))
        if self.publish_attention and getattr(runtime, "backend", "torch") != "torch":
            self.get_logger().warning("publish_attention runs every inference on torch (the exported "
                                      "graph has no attention output); set it false to use the "
                                      f"{runtime.backend} backend")
        with self.lock:
            self.runtime, self.selector = runtime, selector
            self.cameras = cameras
            self.image_size = runtime.config.image_size
            self.last_error = ""
            self.lifecycle_state = self.state = "inactive"
            self._active_episode = None
        self._stop = threading.Event()  # per worker: one that outlived a cleanup stays stopped
        self._worker = threading.Thread(target=self._inference_loop, name="inference", daemon=True)
        self._worker.start()
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
            # The measured pose, as ros2_control holds on deactivation. (The last command would be
            # up to 0.7 rad ahead of a fast-moving arm, measured; the measured pose costs a settle
            # of the position controller's tracking error under gravity, 0.07-0.25 rad at joint 2.)
            q = self.joint_positions
            self.hold_pose = None if q is None else (q[:7].copy(), float(q[7]))
            self.last_command = self.hold_pose
        self.get_logger().info("inactive: the arm holds where it is")
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._stop_worker()
        with self.lock:
            self.runtime = self.selector = None
            self.hold_pose = None
            self.lifecycle_state = self.state = "unconfigured"
            self._drain_jobs()
        self.get_logger().info("unconfigured: the model is released")
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.on_cleanup(state)
        self.lifecycle_state = self.state = "finalized"
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        self.on_cleanup(state)
        return TransitionCallbackReturn.SUCCESS

    def _stop_worker(self) -> None:
        self._stop.set()
        worker, self._worker = self._worker, None
        if worker is not None and worker.is_alive() and threading.current_thread() is not worker:
            worker.join(timeout=10.0)

    def _drain_jobs(self) -> None:
        try:
            while True:
                self._jobs.get_nowait()
        except queue.Empty:
            pass

    # ------------------------------------------------------------ live parameters
    def _on_set_parameters(self, parameters) -> SetParametersResult:
        """Validate and apply `ros2 param set`: live parameters take effect now, configure-time
        ones only while unconfigured, fixed ones never; the reason comes back to the caller."""
        for param in parameters:
            name, value = param.name, param.value
            if name in FIXED_PARAMETERS:
                return SetParametersResult(successful=False,
                                           reason=f"{name} is fixed when the node starts; restart it to change it")
            if name in CONFIGURE_PARAMETERS and self.lifecycle_state != "unconfigured":
                return SetParametersResult(successful=False, reason=(
                    f"{name} is read at configure: deactivate and clean up the node first "
                    f"(it is {self.lifecycle_state})"))
            reason = check_live_value(name, value)
            if reason:
                return SetParametersResult(successful=False, reason=reason)
        with self.lock:
            values = {p.name: p.value for p in parameters}
            execution = values.get("execution", self.get_parameter("execution").value)
            m = values.get("ensemble_m", self.get_parameter("ensemble_m").value)
            if self.runtime is not None and ("execution" in values or "ensemble_m" in values):
                # A fresh chunk executor: the chunks of the old one are dropped, the selector
                # holds the last command until the next camera pair's chunk.
                self.runtime.executor = make_executor(execution, self.runtime.config, m, self.control_rate)
                self.runtime.execution, self.runtime.m = execution, float(m)
            if "stale_timeout" in values:
                self.stale_timeout_ns = int(values["stale_timeout"] * 1e9)
            if "max_joint_speed" in values and self.selector is not None:
                self.selector.limiter.max_step = values["max_joint_speed"] / self.control_rate
        for name in values:
            if name in LIVE_PARAMETERS:
                self.get_logger().info(f"{name} = {values[name]!r} from now on")
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------ inputs
    @guarded("{0} image")
    def image_callback(self, camera: str, msg: Image) -> None:
        try:
            expected = conv.optical_frame(camera)
            if msg.header.frame_id not in ("", expected):
                raise conv.ConversionError(f"frame_id {msg.header.frame_id[:80]!r}, expected {expected!r} or empty")
            if int(msg.height) * int(msg.width) > MAX_IMAGE_PIXELS:
                raise conv.ConversionError(f"image is {msg.width}x{msg.height}, over {MAX_IMAGE_PIXELS} pixels")
            stamp = conv.stamp_to_ns(msg.header.stamp)
            if self._clock_ns >= 0 and stamp > self._clock_ns + MAX_FUTURE_S * 1e9:
                raise conv.ConversionError(f"stamped {stamp * 1e-9:.3f} s, more than {MAX_FUTURE_S:.0f} s ahead of "
                                           f"/clock ({self._clock_ns * 1e-9:.3f} s)")
            rgb = conv.image_from_msg(msg)
            rgb = self._fit_size(rgb)
        except conv.ConversionError:
            self.stats["rejected_images"] += 1
            raise
        with self.lock:
            self.images[camera] = (stamp, rgb)
            stamps = {self.images[c][0] for c in self.cameras if c in self.images}
            complete_pair = len(stamps) == 1 and all(c in self.images for c in self.cameras)
            if complete_pair and stamp > self.last_pair_ns:
                self._pair_ns = stamp
                self._submit_realtime()
        self.try_lockstep_tick()

    def joint_state_callback(self, msg) -> None:
        super().joint_state_callback(msg)
        with self.lock:
            if self.mode == "realtime" and self.joint_positions is not None:
                history = self._joint_history
                history[self.joint_stamp_ns] = self.joint_positions
                while len(history) > JOINT_HISTORY:
                    del history[min(history)]
            self._start_episode_realtime()
            self._submit_realtime()

    def episode_callback(self, msg) -> None:
        super().episode_callback(msg)
        with self.lock:
            self._start_episode_realtime()
            self._submit_realtime()

    def _start_episode_realtime(self) -> bool:
        """Realtime (lock held): reset the selector for the running episode once a joint state
        of that episode is here, and say whether it has been reset. The first control tick of
        an episode can come before it: sim_node publishes /clock at the episode's start twice
        (the episode, then its first observation), and a tick that acts on the second one acts
        on the previous episode's last joint state. A selector reset from that pose limits the
        first commands towards where the last episode ended (measured live: the arm swung back
        over the blocks, seed 100001 failed in 0.75 s). Chunks and inferences of the previous
        episode are dropped."""
        info = self.episode
        if self.mode != "realtime" or self.selector is None or info is None or info.state != "running":
            return False
        if self._started_episode == info.episode:
            return True
        if self.joint_positions is None or self.joint_stamp_ns < info.start_ns:
            return False  # only the previous episode's joint states so far
        first = self._joint_history.get(info.start_ns, self.joint_positions)  # the reset pose
        self.selector.reset(first)
        self._started_episode = info.episode
        if self.lifecycle_state == "active":
            self.last_command = None
        return True

    def _submit_realtime(self) -> None:
        """Realtime: infer on the newest complete camera pair once the joint state of its
        tick (or a later one) is here too (lock held). Submitting on the images alone could
        pair them with the previous tick's joints: in-process evaluation and lockstep never do
        that, and measured live it cost grasps (docs/architecture.md, "Threading")."""
        pair = self._pair_ns
        if self.mode != "realtime" or pair is None or pair <= self.last_pair_ns or self.joint_stamp_ns < pair:
            return
        if not all(self.images[c][0] == pair for c in self.cameras):
            return  # an image of a newer pair has arrived meanwhile: wait for that pair
        info = self.episode_for(pair)
        if info is None or not self._start_episode_realtime() or info.episode != self._started_episode:
            return  # the pair's episode has not started here yet (its joint state or message is on its way)
        self.last_pair_ns = pair
        # The joint state of the pair's own tick (sim_node renders both at the same instant); a
        # later one only when that one never came.
        joints = self._joint_history.get(pair)
        if joints is None:
            self.stats["pairs_joint_mismatch"] += 1
        self._submit(pair, joints=joints)

    def on_clock_reset(self, now_ns: int) -> None:
        """Sim time went back (a restarted sim_node; lock held): pairs, joint history and the
        started episode of the old timeline would hold back every newer-looking check, so they
        go; the chunks go at the new episode's start (_start_episode_realtime)."""
        self.last_pair_ns, self._pair_ns = -1, None
        self.images = {c: v for c, v in self.images.items() if v[0] <= now_ns}
        self._joint_history.clear()
        self._started_episode = None

    def _fit_size(self, rgb: np.ndarray) -> np.ndarray:
        size = self.image_size or rgb.shape[0]
        h, w = rgb.shape[:2]
        if (h, w) == (size, size):
            return rgb
        if abs(h / w - 1.0) > 0.01:
            raise conv.ConversionError(f"image is {w}x{h}; the policy needs square images")
        return cv2.resize(np.ascontiguousarray(rgb), (size, size), interpolation=cv2.INTER_AREA)

    def _submit(self, stamp_ns: int, tick: int | None = None, joints: np.ndarray | None = None) -> None:
        """Hand the camera pair of `stamp_ns` to the worker (lock held). The queue holds
        one job: a newer pair replaces a pair still waiting (realtime never queues up)."""
        if self.selector is None or self.lifecycle_state != "active":
            return
        if self.joint_positions is None or self.episode is None or self.instruction is None:
            return
        if any(self.images[c][1].shape[0] != self.image_size for c in self.cameras):
            return  # received before configure knew the policy's image size
        info = self.episode_for(stamp_ns)
        if info is None:
            return
        job = (info.episode, tick if tick is not None else info.tick_of(stamp_ns), stamp_ns,
               {c: self.images[c][1] for c in self.cameras},
               (self.joint_positions if joints is None else joints).copy(), self.instruction)
        try:
            self.selector.forget(self._jobs.get_nowait()[1])  # replaced before it ran: never comes
        except queue.Empty:
            pass
        self.selector.expect(job[1])
        self._jobs.put_nowait(job)

    # ------------------------------------------------------------ inference thread
    def _inference_loop(self) -> None:
        realtime.name_os_thread("inference")
        # Its own scheduling, not the one it inherits from the thread that configured the node
        # (the executor thread, on SCHED_FIFO once the node is up).
        realtime.realtime_thread(self.inference_priority, "inference thread", self.get_logger())
        runtime, stop = self.runtime, self._stop
        while not stop.is_set():
            try:
                episode, tick, stamp, images, position, instruction = self._jobs.get(timeout=0.1)
            except queue.Empty:
                continue
            started = time.perf_counter()
            try:
                pred = runtime.predict_chunk(images, position, instruction, need_attention=self.publish_attention)
            except Exception as exc:  # noqa: BLE001 - any failure: hold and report, never crash the node
                with self.lock:
                    self.stats["inference_failures"] += 1
                    self.state = "inference_failed"
                    if self.selector is not None:
                        self.selector.forget(tick)
                rejections(self).reject("inference", f"{exc!r}; holding")
                continue
            with self.lock:
                selector = self.selector
                if stop.is_set() or selector is None or runtime is not self.runtime:
                    return  # cleaned up meanwhile: nothing of this node is used any more
                if self.mode == "realtime":  # only chunks of the episode the selector was reset for
                    ended = (episode != self._started_episode or self.episode is None
                             or self.episode.state != "running")
                else:
                    ended = self.episode is None or self.episode.episode != episode
                if ended:
                    selector.forget(tick)
                    self.stats["stale_chunks_dropped"] += 1
                    continue  # a chunk for an episode that has ended
                # Everything the worker spent on the pair (preprocessing included).
                self.stats["inference_ms"] = (time.perf_counter() - started) * 1e3
                self.chunk_count += 1
                self.target_guess = pred.target
                # Realtime: usable from now on (inference has taken its real time); lockstep:
                # from tick + latency_ticks.
                selector.add_chunk(tick, pred.actions, usable_tick=tick if self.mode == "realtime" else None,
                                   target=pred.target)
                if self.mode == "realtime" and self._last_tick_index is not None:
                    # The first tick to use it: the one now due (waiting for its joint state), else the next.
                    index = self._last_tick_index + (0 if self._due_ns is not None else 1)
                    latency = self.episode.tick_of(index * 1_000_000_000 // self.control_rate) - tick
                    self.stats["chunks_timed"] += 1
                    self.stats["chunk_latency_ticks"] += latency
                    self.stats["late_chunks"] += int(latency > 1)
                # Publishing under the lock: destroy_node takes the lock before the publishers go.
                if not stop.is_set():
                    self.chunk_pub.publish(conv.action_chunk_msg(stamp * 1e-9, pred.actions, 1.0 / self.control_rate))
                    if pred.attention is not None:
                        self.attention_pub.publish(conv.attention_msg(pred.attention, self.cameras))
            self.try_lockstep_tick()

    # ------------------------------------------------------------ control
    def observation_complete(self, stamp_ns: int, tick: int) -> bool:
        if not super().observation_complete(stamp_ns, tick):
            return False
        if self.selector is None or self.lifecycle_state != "active":
            return True  # unconfigured or inactive: the hold needs only the joint state
        info = self.episode
        if info.is_camera_tick(tick):
            if not all(c in self.images and self.images[c][0] == stamp_ns for c in self.cameras):
                return False
            if not self.selector.is_known(tick) and stamp_ns > self._submitted_ns:
                self._submitted_ns = stamp_ns
                self._submit(stamp_ns, tick)
        # Every chunk usable by now must have been computed.
        return not self.selector.awaiting(tick)

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
        selector = self.selector
        if self.mode == "realtime":
            self._check_deadline()
            if not self._start_episode_realtime():
                self.state = "waiting"
                return None  # no joint state of this episode yet: the sim holds its reset pose
            if self._stale(stamp_ns):
                self.state = "stale"
                self.stats["stale_ticks"] += 1
                return selector.held if selector.started else None
        command = selector.command(tick, self.joint_positions)  # the measured fingers: the grasp check
        if selector.holding:
            self.state = "waiting"
            # Realtime publishes nothing before the first chunk; lockstep answers every tick.
            return command if selector.started or self.mode == "lockstep" else None
        self.stats["ticks_without_chunk"] = max(0, tick - selector.last_start_tick)
        self.state = "ok" if self.state != "inference_failed" or self.chunk_count else self.state
        return command

    def _stale(self, now_ns: int) -> bool:
        newest_image = min((self.images[c][0] for c in self.cameras if c in self.images), default=-1)
        return (now_ns - self.joint_stamp_ns > self.stale_timeout_ns
                or now_ns - newest_image > self.stale_timeout_ns)

    def _check_deadline(self) -> None:
        now = time.monotonic()
        if self._last_tick_wall is not None and now - self._last_tick_wall > 1.5 / self.control_rate:
            self.stats["deadline_misses"] += 1
        self._last_tick_wall = now

    def waiting_for(self) -> list[str]:
        missing = super().waiting_for()
        for camera, topic in self.camera_topics.items():
            if camera not in self.images:
                missing.append(f"{camera} camera images on {self.resolve_topic_name(topic)}")
        if self.lifecycle_state == "unconfigured":
            missing.append("configure (ros2 lifecycle set " + self.get_fully_qualified_name() + " configure)"
                           + (f"; {self.last_error}" if self.last_error else ""))
        elif self.lifecycle_state == "inactive":
            missing.append("activate (ros2 lifecycle set " + self.get_fully_qualified_name() + " activate)")
        return missing

    # ------------------------------------------------------------ services and diagnostics
    def enable_callback(self, request, response):
        self.enabled = True
        response.success, response.message = True, "enabled"
        return response

    def disable_callback(self, request, response):
        self.enabled = False
        response.success, response.message = True, "disabled: no commands are published"
        return response

    def publish_diagnostics(self) -> None:
        now = self.get_clock().now().nanoseconds
        with self.lock:
            self.waiting = self.waiting_for()
            newest = max((s for s, _ in self.images.values()), default=-1)
            values = {
                "state": self.state,
                "lifecycle": self.lifecycle_state,
                "waiting_for": "; ".join(self.waiting) or "nothing",
                "last_error": self.last_error or "none",
                "inference_ms": f"{self.stats['inference_ms']:.2f}",
                "observation_age_ms": f"{(now - newest) / 1e6:.1f}" if newest >= 0 else "nan",
                "ticks_without_fresh_chunk": str(self.stats["ticks_without_chunk"]),
                "deadline_misses": str(self.stats["deadline_misses"]),
                "missed_ticks": str(self.missed_ticks),
                "inference_failures": str(self.stats["inference_failures"]),
                "stale_ticks": str(self.stats["stale_ticks"]),
                "pairs_joint_mismatch": str(self.stats["pairs_joint_mismatch"]),
                "stale_chunks_dropped": str(self.stats["stale_chunks_dropped"]),
                "chunks_timed": str(self.stats["chunks_timed"]),
                "chunk_latency_ticks": str(self.stats["chunk_latency_ticks"]),
                "late_chunks": str(self.stats["late_chunks"]),
                "rejected_images": str(self.stats["rejected_images"]),
                "rejected_messages": str(rejections(self).total),
                "chunks": str(self.chunk_count),
                "commands": str(self.commands_published),
                "memory_locked": str(realtime.memory_locked()).lower(),
                **gc_values(),
                **(self.answer_timing.values() if self.mode == "realtime" else {}),
            }
            if self.target_guess is not None:  # the target head's guess of the named block (m)
                values["target_xyz_m"] = " ".join(f"{v:.3f}" for v in self.target_guess)
            aim = None if self.selector is None else self.selector.aim
            values["assist"] = "off" if aim is None else "on"
            balance = getattr(self.runtime, "colour_balance", None)
            values["colour_gains"] = ("off" if balance is None
                                      else " ".join(f"{g:.3f}" for g in balance.last_gains.tolist()))
            if aim is not None:  # the grasp point's shift now, and the largest this episode (cm)
                values["aim_shift_cm"] = f"{float(np.linalg.norm(aim.shift)) * 100:.2f}"
                values["aim_shift_cm_max"] = f"{aim.largest_shift * 100:.2f}"
                values["grasps_reopened"] = str(aim.misses)
                reflex = aim.reflex  # the re-grasp reflex's phase now ("-": the chunks drive)
                values["regrasp"] = "policy" if reflex is None else (reflex.phase if reflex.active else "-")
        level = DiagnosticStatus.OK if values["state"] in ("ok", "waiting") else DiagnosticStatus.WARN
        if self.waiting:
            level = DiagnosticStatus.WARN
        message = values["state"] + (f": waiting for {values['waiting_for']}" if self.waiting else "")
        status = DiagnosticStatus(level=level, name="policy_node: inference", message=message,
                                  hardware_id="arm_act",
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    def destroy_node(self):
        self._stop_worker()
        with self.lock:  # a worker that outlived the join publishes only with this lock held
            return super().destroy_node()


def main(args=None):
    from arm_act.ros.node_main import spin_node

    spin_node(PolicyNode, args)


if __name__ == "__main__":
    main()
