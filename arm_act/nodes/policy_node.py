"""policy_node: the trained transformer policy as a ROS 2 controller.

Keeps the latest observation (both cameras, joint states, task, episode), runs inference on
a worker thread for each new camera pair, and publishes arm/gripper commands from the chunk
executor (temporal ensembling or queue) at the control rate on sim time. The control tick
(driven by /clock, see ControllerNode) never waits for inference: it only reads the chunks
the worker has finished (docs/architecture.md, "Threading").

Safety: observations older than `stale_timeout` (sim seconds) or a failed inference make the
node hold the last command and say so in policy/diagnostics; it resumes with fresh data.
Every command is clamped to the joint limits and a maximum joint speed.
"""
from __future__ import annotations

import queue
import threading
import time
from pathlib import Path

import cv2
import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import Image
from std_msgs.msg import Float32MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from arm_act.common.paths import default_checkpoint
from arm_act.nodes.controller import ControllerNode
from arm_act.policy.runtime import CommandLimiter, PolicyRuntime
from arm_act.policy.selection import ActionSelector
from arm_act.ros import conversions as conv


class PolicyNode(ControllerNode):
    def __init__(self, runtime: PolicyRuntime | None = None, **kwargs):
        super().__init__("policy_node", **kwargs)
        declare = self.declare_parameter
        declare("checkpoint", "")
        declare("execution", "ensemble")
        declare("ensemble_m", 0.1)
        declare("torch_threads", 1)
        declare("backend", "torch")
        declare("stale_timeout", 0.5)
        declare("max_joint_speed", 3.0)
        declare("latency_ticks", 1)
        declare("publish_attention", True)
        declare("front_topic", "camera/front/image_raw")
        declare("wrist_topic", "camera/wrist/image_raw")
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        self.stale_timeout_ns = int(float(p("stale_timeout")) * 1e9)
        if runtime is None:
            checkpoint = p("checkpoint") or str(default_checkpoint())
            runtime = PolicyRuntime.from_checkpoint(
                Path(checkpoint), execution=str(p("execution")), m=float(p("ensemble_m")),
                threads=int(p("torch_threads")), backend=str(p("backend")),
            )
            self.get_logger().info(f"loaded {checkpoint} ({runtime.execution}, {runtime.backend} "
                                   f"backend{': ' + runtime.backend_note if runtime.backend_note else ''})")
        self.runtime = runtime
        self.cameras = tuple(runtime.config.cameras)
        self.image_size = runtime.config.image_size
        # Lockstep: a chunk from the camera pair of tick c is used from tick c+latency_ticks, the
        # rule in-process evaluation uses (the same ActionSelector), so both give the same
        # episodes. Realtime: a chunk is used as soon as its inference finishes.
        self.selector = ActionSelector(runtime, int(p("latency_ticks")),
                                       CommandLimiter(float(p("max_joint_speed")), self.control_rate))
        self.enabled = True

        self.images: dict[str, tuple[int, np.ndarray]] = {}  # camera -> (stamp ns, (H, W, 3))
        self.last_pair_ns = -1  # the newest camera pair handed to inference
        self._pair_ns: int | None = None  # the newest complete camera pair received
        self.chunk_count = 0
        self.target_guess = None  # the target head's last guess (3,) m, when the policy has one
        self.stats = {"inference_ms": float("nan"), "deadline_misses": 0, "ticks_without_chunk": 0,
                      "inference_failures": 0, "rejected_images": 0}
        self.state = "waiting"
        self._last_tick_wall: float | None = None
        self._submitted_ns = -1

        topics = {"front": str(p("front_topic")), "wrist": str(p("wrist_topic"))}
        for camera in self.cameras:
            topic = topics.get(camera, f"camera/{camera}/image_raw")
            self.create_subscription(Image, topic, lambda msg, c=camera: self.image_callback(c, msg),
                                     qos_profile_sensor_data)
        self.chunk_pub = self.create_publisher(JointTrajectory, "policy/action_chunk", 10)
        # For viewers: the mean cross-attention of the action queries over each camera's
        # patches (Float32MultiArray, dims camera x row x col), one per chunk.
        self.publish_attention = bool(p("publish_attention"))
        if self.publish_attention and getattr(runtime, "backend", "torch") != "torch":
            self.get_logger().warning("publish_attention runs every inference on torch (the exported "
                                      "graph has no attention output); set it false to use the "
                                      f"{runtime.backend} backend")
        self.attention_pub = self.create_publisher(Float32MultiArray, "policy/attention", 10)
        self.diag_pub = self.create_publisher(DiagnosticArray, "policy/diagnostics", 10)
        self.create_service(Trigger, "~/enable", self.enable_callback)
        self.create_service(Trigger, "~/disable", self.disable_callback)
        self.create_timer(0.5, self.publish_diagnostics)

        self._jobs: queue.Queue = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._inference_loop, name="inference", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------ inputs
    def image_callback(self, camera: str, msg: Image) -> None:
        try:
            rgb = conv.image_from_msg(msg)
            rgb = self._fit_size(rgb)
        except conv.ConversionError as exc:
            self.stats["rejected_images"] += 1
            self.get_logger().warning(f"rejected {camera} image: {exc}", throttle_duration_sec=5.0)
            return
        stamp = conv.stamp_to_ns(msg.header.stamp)
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
            self._submit_realtime()

    def _submit_realtime(self) -> None:
        """Realtime: infer on the newest complete camera pair once the joint state of its
        tick (or a later one) is here too (lock held). sim_node publishes a tick's images
        before its joint state, so submitting on the images alone would pair them with the
        previous tick's joints: in-process evaluation and lockstep never do that, and
        measured live it cost grasps (docs/architecture.md, "Threading")."""
        pair = self._pair_ns
        if self.mode != "realtime" or pair is None or pair <= self.last_pair_ns or self.joint_stamp_ns < pair:
            return
        if not all(self.images[c][0] == pair for c in self.cameras):
            return  # an image of a newer pair has arrived meanwhile: wait for that pair
        self.last_pair_ns = pair
        self._submit(pair)

    def _fit_size(self, rgb: np.ndarray) -> np.ndarray:
        h, w = rgb.shape[:2]
        if (h, w) == (self.image_size, self.image_size):
            return rgb
        if abs(h / w - 1.0) > 0.01:
            raise conv.ConversionError(f"image is {w}x{h}; the policy needs square images")
        return cv2.resize(np.ascontiguousarray(rgb), (self.image_size, self.image_size), interpolation=cv2.INTER_AREA)

    def _submit(self, stamp_ns: int, tick: int | None = None) -> None:
        """Hand the camera pair of `stamp_ns` to the worker (lock held). The queue holds
        one job: a newer pair replaces a pair still waiting (realtime never queues up)."""
        if self.joint_positions is None or self.episode is None or self.instruction is None:
            return
        info = self.episode_for(stamp_ns)
        if info is None:
            return
        job = (info.episode, tick if tick is not None else info.tick_of(stamp_ns), stamp_ns,
               {c: self.images[c][1] for c in self.cameras}, self.joint_positions.copy(), self.instruction)
        try:
            self.selector.forget(self._jobs.get_nowait()[1])  # replaced before it ran: never comes
        except queue.Empty:
            pass
        self.selector.expect(job[1])
        self._jobs.put_nowait(job)

    # ------------------------------------------------------------ inference thread
    def _inference_loop(self) -> None:
        while not self._stop.is_set():
            try:
                episode, tick, stamp, images, position, instruction = self._jobs.get(timeout=0.1)
            except queue.Empty:
                continue
            started = time.perf_counter()
            try:
                pred = self.runtime.predict_chunk(images, position, instruction,
                                                  need_attention=self.publish_attention)
            except Exception as exc:  # noqa: BLE001 - any failure: hold and report, never crash the node
                with self.lock:
                    self.stats["inference_failures"] += 1
                    self.state = "inference_failed"
                    self.selector.forget(tick)
                self.get_logger().error(f"inference failed: {exc!r}; holding", throttle_duration_sec=5.0)
                continue
            with self.lock:
                if self.episode is None or self.episode.episode != episode:
                    self.selector.forget(tick)
                    continue  # a chunk for an episode that has ended
                # Everything the worker spent on the pair (preprocessing included).
                self.stats["inference_ms"] = (time.perf_counter() - started) * 1e3
                self.chunk_count += 1
                self.target_guess = pred.target
                # Realtime: usable from now on (inference has taken its real time); lockstep:
                # from tick + latency_ticks.
                self.selector.add_chunk(tick, pred.actions, usable_tick=tick if self.mode == "realtime" else None)
            self.chunk_pub.publish(conv.action_chunk_msg(stamp * 1e-9, pred.actions, 1.0 / self.control_rate))
            if pred.attention is not None:
                self.attention_pub.publish(conv.attention_msg(pred.attention, self.cameras))
            self.try_lockstep_tick()

    # ------------------------------------------------------------ control
    def observation_complete(self, stamp_ns: int, tick: int) -> bool:
        if not super().observation_complete(stamp_ns, tick):
            return False
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
        self.selector.reset(self.joint_positions)
        self.last_command = None
        self.get_logger().info(f"episode {info.episode}: {info.instruction}")

    def compute_command(self, stamp_ns: int, tick: int):
        if not self.enabled:
            self.state = "disabled"
            return None
        selector = self.selector
        if self.mode == "realtime":
            self._check_deadline()
            if self._stale(stamp_ns):
                self.state = "stale"
                return selector.held if selector.started else None
        command = selector.command(tick)
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
            newest = max((s for s, _ in self.images.values()), default=-1)
            values = {
                "state": self.state,
                "inference_ms": f"{self.stats['inference_ms']:.2f}",
                "observation_age_ms": f"{(now - newest) / 1e6:.1f}" if newest >= 0 else "nan",
                "ticks_without_fresh_chunk": str(self.stats["ticks_without_chunk"]),
                "deadline_misses": str(self.stats["deadline_misses"]),
                "missed_ticks": str(self.missed_ticks),
                "inference_failures": str(self.stats["inference_failures"]),
                "rejected_images": str(self.stats["rejected_images"]),
                "chunks": str(self.chunk_count),
                "commands": str(self.commands_published),
            }
            if self.target_guess is not None:  # the target head's guess of the named block (m)
                values["target_xyz_m"] = " ".join(f"{v:.3f}" for v in self.target_guess)
        level = DiagnosticStatus.OK if values["state"] in ("ok", "waiting") else DiagnosticStatus.WARN
        status = DiagnosticStatus(level=level, name="policy_node: inference", message=values["state"],
                                  hardware_id="arm_act",
                                  values=[KeyValue(key=k, value=v) for k, v in values.items()])
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)

    def destroy_node(self):
        self._stop.set()
        if self._worker.is_alive():
            self._worker.join(timeout=5.0)
        return super().destroy_node()


def main(args=None):
    from arm_act.ros.node_main import spin_node

    spin_node(PolicyNode, args)


if __name__ == "__main__":
    main()
