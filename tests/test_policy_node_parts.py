"""policy_node's parts without ROS: ObservationSync (cameras and joint states by stamp),
InferenceWorker (the inference thread and its one-job queue), PolicyStats (the counters and
policy/diagnostics) and the parameter rules of policy_parameters."""
from __future__ import annotations

import math
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.nodes.inference_worker import InferenceWorker, Job
from arm_act.nodes.observation_sync import JOINT_HISTORY, MAX_IMAGE_PIXELS, ObservationSync
from arm_act.nodes.policy_parameters import (
    CONFIGURE_PARAMETERS,
    FIXED_PARAMETERS,
    LIVE_PARAMETERS,
    apply_live,
    check_live_value,
    refusal,
)
from arm_act.nodes.policy_stats import DiagnosticsInput, PolicyStats, diagnostic_status
from arm_act.ros import conversions as conv

pytestmark = pytest.mark.unit

CAMERAS = ("front", "wrist")
S = 1_000_000_000  # ns per second


def _sync(realtime: bool = True, size: int | None = 32) -> ObservationSync:
    sync = ObservationSync(CAMERAS, realtime, max_future_s=1.0)
    if size is not None:
        sync.configure(CAMERAS, size)
    return sync


def _image(t: float, camera: str, h: int = 32, w: int = 32, value: int = 100):
    return conv.image_msg(t, np.full((h, w, 3), value, np.uint8), camera)


def _episode(episode=0, state="running", start=1.0) -> conv.EpisodeInfo:
    return conv.EpisodeInfo(episode=episode, seed=episode, n_blocks=3, state=state,
                            instruction="put the red block in the box", time=0.0, start=start)


class FakeSelector:
    def __init__(self):
        self.expected: list[int] = []
        self.forgotten: list[int] = []
        self.resets: list[np.ndarray] = []
        self.known: set[int] = set()
        self.waiting_for: set[int] = set()

    def expect(self, tick):
        self.expected.append(tick)

    def forget(self, tick):
        self.forgotten.append(tick)

    def reset(self, pose):
        self.resets.append(np.array(pose))

    def is_known(self, tick):
        return tick in self.known

    def awaiting(self, tick):
        return tick in self.waiting_for


# ---------------------------------------------------------------- ObservationSync: images
def test_decode_accepts_the_cameras_images_and_scales_square_ones_to_the_policy():
    sync = _sync(size=32)
    stamp, rgb = sync.decode("front", _image(1.5, "front", 64, 64, value=77))
    assert stamp == int(1.5 * S) and rgb.shape == (32, 32, 3) and rgb.dtype == np.uint8
    assert np.all(rgb == 77)
    msg = _image(2.0, "wrist")
    msg.header.frame_id = ""  # an empty frame is accepted
    assert sync.decode("wrist", msg)[1].shape == (32, 32, 3)
    bgr = _image(1.0, "front")
    bgr.encoding = "bgr8"
    bgr.data = np.tile(np.array([1, 2, 3], np.uint8), 32 * 32).tobytes()
    assert sync.decode("front", bgr)[1][0, 0].tolist() == [3, 2, 1]  # converted to RGB
    # Before configure the image keeps its own (square) size.
    assert _sync(size=None).decode("front", _image(1.0, "front", 48, 48))[1].shape == (48, 48, 3)


@pytest.mark.parametrize("bad, reason", [
    (lambda m: setattr(m.header, "frame_id", "wrist_camera_optical_frame"), "frame_id"),
    (lambda m: setattr(m, "encoding", "32FC1"), "encoding"),
    (lambda m: setattr(m, "data", bytes(10)), "bytes"),  # data shorter than height x step
    (lambda m: (setattr(m, "height", 4097), setattr(m, "width", 4097)), "pixels"),
    (lambda m: setattr(m, "width", 16), "square"),  # 32 rows of 16 pixels (the rest is row padding)
    (lambda m: setattr(m, "step", 10), "step"),  # rows shorter than width x 3
])
def test_decode_rejects_what_the_policy_cannot_use(bad, reason):
    msg = _image(1.0, "front")
    bad(msg)
    with pytest.raises(conv.ConversionError, match=reason):
        _sync().decode("front", msg)


def test_decode_rejects_non_square_images_and_stamps_ahead_of_the_clock():
    sync = _sync()
    with pytest.raises(conv.ConversionError, match="square"):
        sync.decode("front", _image(1.0, "front", 32, 48))
    with pytest.raises(conv.ConversionError, match="ahead of /clock"):
        sync.decode("front", _image(5.0, "front"), clock_ns=3 * S)
    assert sync.decode("front", _image(3.5, "front"), clock_ns=3 * S)[0] == int(3.5 * S)  # within 1 s: fine
    assert sync.decode("front", _image(99.0, "front"), clock_ns=-1)[0] == 99 * S  # no /clock yet: no check
    assert 4097 * 4097 > MAX_IMAGE_PIXELS


def test_a_pair_is_complete_only_with_both_cameras_at_one_stamp():
    sync = _sync()
    rgb = np.zeros((32, 32, 3), np.uint8)
    assert not sync.add_image("front", 1 * S, rgb)
    assert not sync.add_image("wrist", 2 * S, rgb)  # another stamp: no pair
    assert sync.pair_ns is None and not sync.has_pair(1 * S) and not sync.has_pair(2 * S)
    assert sync.add_image("front", 2 * S, rgb)
    assert sync.pair_ns == 2 * S and sync.has_pair(2 * S)
    assert sync.newest_stamp() == 2 * S and set(sync.pair_images()) == set(CAMERAS)
    sync.take_pair(2 * S)
    assert not sync.add_image("front", 2 * S, rgb)  # the pair already went to inference
    assert not sync.add_image("wrist", 1 * S, rgb)  # an older image breaks the pair
    assert not sync.has_pair(2 * S)


def test_images_from_before_configure_are_not_sized_for_the_policy():
    sync = _sync(size=None)
    for camera in CAMERAS:
        sync.add_image(camera, S, sync.fit_size(np.zeros((48, 48, 3), np.uint8)))
    sync.configure(("wrist", "front"), 32)
    assert not sync.sized_for_policy()
    assert list(sync.pair_images()) == ["wrist", "front"]  # the policy's camera order
    for camera in CAMERAS:
        sync.add_image(camera, 2 * S, np.zeros((32, 32, 3), np.uint8))
    assert sync.sized_for_policy()


def test_stale_when_the_joint_state_or_any_camera_is_older_than_the_timeout():
    sync = _sync()
    timeout = S // 2
    assert sync.stale(10 * S, 10 * S, timeout)  # no image at all: stale
    sync.add_image("front", 9 * S, np.zeros((32, 32, 3), np.uint8))
    assert sync.stale(10 * S, 10 * S, timeout)  # the only image is a second old
    sync.add_image("front", 10 * S, np.zeros((32, 32, 3), np.uint8))
    assert not sync.stale(10 * S, 10 * S, timeout)  # the cameras received so far are fresh
    sync.add_image("wrist", 9 * S, np.zeros((32, 32, 3), np.uint8))
    assert sync.stale(10 * S, 10 * S, timeout)  # the wrist image is a second old
    sync.add_image("wrist", 10 * S - timeout, np.zeros((32, 32, 3), np.uint8))
    assert not sync.stale(10 * S, 10 * S, timeout)  # exactly the timeout: still fresh
    assert sync.stale(10 * S, 10 * S - timeout - 1, timeout)  # the joint state is 1 ns too old
    assert sync.stale(10 * S, -1, timeout)  # no joint state yet


# ---------------------------------------------------------------- ObservationSync: realtime pairing
def test_realtime_pair_waits_for_the_joint_state_of_its_tick_and_remembers_it():
    sync = _sync(realtime=True)
    rgb = np.zeros((32, 32, 3), np.uint8)
    sync.add_joints(int(1.18 * S), np.full(9, 0.1))
    for camera in CAMERAS:
        sync.add_image(camera, int(1.2 * S), rgb)
    assert sync.pair_due(int(1.18 * S)) is None  # the joints are a tick old
    sync.add_joints(int(1.2 * S), np.full(9, 0.2))
    sync.add_joints(int(1.22 * S), np.full(9, 0.3))  # a later one overtook nothing
    assert sync.pair_due(int(1.22 * S)) == int(1.2 * S)
    joints = sync.take_pair(int(1.2 * S))
    assert joints[0] == 0.2
    assert sync.pair_due(int(1.22 * S)) is None  # handed over once


def test_realtime_pair_is_not_due_while_a_newer_image_breaks_it_or_its_joints_never_came():
    sync = _sync(realtime=True)
    rgb = np.zeros((32, 32, 3), np.uint8)
    for camera in CAMERAS:
        sync.add_image(camera, 2 * S, rgb)
    sync.add_image("front", 3 * S, rgb)  # the next pair's first image
    assert sync.pair_due(3 * S) is None
    sync.add_image("wrist", 3 * S, rgb)
    assert sync.pair_due(3 * S) == 3 * S
    assert sync.take_pair(3 * S) is None  # no joint state stamped 3 s: a later one stands in


def test_joint_history_keeps_only_the_newest_stamps_and_only_in_realtime():
    sync = _sync(realtime=True)
    for i in range(JOINT_HISTORY + 5):
        sync.add_joints(i, np.full(9, float(i)))
    assert sorted(sync.joint_history) == list(range(5, JOINT_HISTORY + 5))
    sync.add_joints(100, None)  # no joint state (a rejected first message): nothing kept
    assert 100 not in sync.joint_history
    lockstep = _sync(realtime=False)
    lockstep.add_joints(1, np.zeros(9))
    assert lockstep.joint_history == {} and lockstep.pair_due(10) is None


def test_realtime_episode_starts_from_its_own_reset_pose():
    sync, selector = _sync(realtime=True), FakeSelector()
    info = _episode(0, start=2.0)
    old = np.full(9, 0.5)
    assert not sync.start_episode(info, old, int(1.98 * S), selector)  # the previous episode's joints
    assert selector.resets == []
    sync.add_joints(2 * S, np.full(9, -0.5))  # the episode's first joint state...
    sync.add_joints(int(2.02 * S), np.full(9, -0.4))  # ... and a later one, the newest
    assert sync.start_episode(info, np.full(9, -0.4), int(2.02 * S), selector)
    assert len(selector.resets) == 1 and selector.resets[0][0] == -0.5 and sync.started_episode == 0
    assert sync.start_episode(info, np.full(9, -0.4), int(2.02 * S), selector)  # once only
    assert len(selector.resets) == 1
    # Not running, no episode, no selector, or lockstep: never started here.
    assert not sync.start_episode(_episode(0, state="success", start=2.0), old, 3 * S, selector)
    assert not sync.start_episode(None, old, 3 * S, selector)
    assert not sync.start_episode(info, old, 3 * S, None)
    assert not _sync(realtime=False).start_episode(info, old, 3 * S, selector)


def test_realtime_start_pose_is_the_newest_joint_state_when_the_first_was_not_kept():
    sync, selector = _sync(realtime=True), FakeSelector()
    assert sync.start_episode(_episode(1, start=2.0), np.full(9, 0.3), int(2.1 * S), selector)
    assert selector.resets[0][0] == 0.3
    assert not sync.start_episode(_episode(2, start=3.0), None, -1, selector)  # no joint state at all


def test_chunks_of_ended_episodes_are_dropped_by_each_modes_rule():
    realtime = _sync(realtime=True)
    realtime.started_episode = 3
    assert not realtime.chunk_ended(3, _episode(3))
    assert realtime.chunk_ended(2, _episode(3))  # an earlier episode's
    assert realtime.chunk_ended(3, _episode(3, state="success"))  # the episode is over
    assert realtime.chunk_ended(3, None)
    assert realtime.usable_tick(7) == 7
    lockstep = _sync(realtime=False)
    assert not lockstep.chunk_ended(3, _episode(3, state="success"))  # lockstep answers to the end
    assert lockstep.chunk_ended(2, _episode(3)) and lockstep.chunk_ended(3, None)
    assert lockstep.usable_tick(7) is None


def test_lockstep_tick_needs_the_pair_on_camera_ticks_and_submits_it_once():
    sync, selector = _sync(realtime=False), FakeSelector()
    submitted = []

    def submit(stamp, tick):
        submitted.append((stamp, tick))

    assert sync.tick_complete(S, 0, True, selector, submit) is False  # no images yet
    assert submitted == []
    for camera in CAMERAS:
        sync.add_image(camera, S, np.zeros((32, 32, 3), np.uint8))
    assert sync.tick_complete(S, 0, True, selector, submit) is True
    assert sync.tick_complete(S, 0, True, selector, submit) is True
    assert submitted == [(S, 0)]  # once
    selector.waiting_for.add(1)
    assert sync.tick_complete(S + S // 50, 1, False, selector, submit) is False  # a chunk it needs is computing
    selector.known.add(5)
    for camera in CAMERAS:
        sync.add_image(camera, 2 * S, np.zeros((32, 32, 3), np.uint8))
    assert sync.tick_complete(2 * S, 5, True, selector, submit) is True
    assert submitted == [(S, 0)]  # tick 5's chunk is known already: not submitted again


def test_clock_reset_forgets_the_old_timeline():
    sync = _sync(realtime=True)
    for camera in CAMERAS:
        sync.add_image(camera, 50 * S, np.zeros((32, 32, 3), np.uint8))
    sync.add_image("front", S // 2, np.zeros((32, 32, 3), np.uint8))
    sync.add_joints(50 * S, np.zeros(9))
    sync.take_pair(50 * S)
    sync.started_episode = 4
    sync.clock_reset(S)
    assert sync.last_pair_ns == -1 and sync.pair_ns is None and sync.started_episode is None
    assert sync.joint_history == {} and list(sync.images) == ["front"]  # only the image of the new timeline
    for camera in CAMERAS:
        sync.add_image(camera, 2 * S, np.zeros((32, 32, 3), np.uint8))
    assert sync.pair_ns == 2 * S  # earlier than the old pairs, and still a new pair


# ---------------------------------------------------------------- InferenceWorker
class FakeRuntime:
    def __init__(self, fail_on=()):
        self.fail_on = set(fail_on)
        self.calls = []

    def predict_chunk(self, images, joints, instruction, need_attention=False):
        self.calls.append((sorted(images), joints.copy(), instruction, need_attention))
        if not np.all(np.isfinite(joints)) or instruction in self.fail_on:
            raise ValueError("joints are not finite")
        return SimpleNamespace(actions=np.zeros((4, 8)), target=None, attention=None)


def _job(tick: int, joints=None, instruction="go") -> Job:
    return Job(0, tick, tick * S, {c: np.zeros((32, 32, 3), np.uint8) for c in CAMERAS},
               np.zeros(9) if joints is None else joints, instruction)


def _wait(condition, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_a_newer_job_replaces_one_still_waiting():
    worker, selector = InferenceWorker(), FakeSelector()
    worker.submit(_job(1), selector)
    worker.submit(_job(2), selector)
    assert selector.expected == [1, 2] and selector.forgotten == [1]
    assert worker.jobs.qsize() == 1 and worker.jobs.get_nowait().tick == 2
    worker.submit(_job(3), selector)
    worker.drain()
    assert worker.jobs.empty()


def test_the_worker_infers_reports_failures_and_goes_on():
    runtime, selector = FakeRuntime(fail_on={"bad"}), FakeSelector()
    chunks, failures = [], []

    def on_chunk(job, pred, started, rt, stop):
        assert rt is runtime and not stop.is_set() and started <= time.perf_counter()
        chunks.append(job.tick)
        return True

    worker = InferenceWorker()
    worker.start(runtime, on_chunk, lambda job, exc: failures.append((job.tick, type(exc))), need_attention=True)
    try:
        worker.submit(_job(1, joints=np.full(9, np.nan)), selector)  # NaN joints: the runtime refuses them
        assert _wait(lambda: failures)
        worker.submit(_job(2, instruction="bad"), selector)
        assert _wait(lambda: len(failures) == 2)
        worker.submit(_job(3), selector)
        assert _wait(lambda: chunks == [3])
        assert failures == [(1, ValueError), (2, ValueError)]
        assert all(call[3] is True for call in runtime.calls) and runtime.calls[0][0] == sorted(CAMERAS)
        assert worker.thread.is_alive() and worker.thread.name == "inference"
    finally:
        thread = worker.thread
        worker.stop()
    assert not thread.is_alive() and worker.thread is None


def test_the_worker_ends_when_the_chunk_callback_says_so_and_a_stopped_one_stays_stopped():
    runtime, selector = FakeRuntime(), FakeSelector()
    worker = InferenceWorker()
    worker.start(runtime, lambda *args: False, lambda job, exc: None)
    first = worker.thread
    worker.submit(_job(1), selector)
    assert _wait(lambda: not first.is_alive())  # the node was cleaned up meanwhile: the thread ends

    release = threading.Event()
    seen_stop = []

    def slow_chunk(job, pred, started, rt, stop):
        release.wait(5.0)
        seen_stop.append(stop.is_set())
        return True

    worker.start(runtime, slow_chunk, lambda job, exc: None)
    second = worker.thread
    worker.submit(_job(2), selector)
    assert _wait(lambda: worker.jobs.empty())
    worker.stop(timeout=0.05)  # it outlives the join (its callback is still running)...
    worker.start(runtime, lambda *args: True, lambda job, exc: None)  # ... and the node configures again
    release.set()
    assert _wait(lambda: not second.is_alive())
    assert seen_stop == [True]  # the old thread saw its own stop event, not the new thread's
    worker.stop()


# ---------------------------------------------------------------- PolicyStats and diagnostics
def _diag_input(**overrides) -> DiagnosticsInput:
    values = dict(state="ok", lifecycle="active", waiting=[], last_error="", observation_age_ns=12_345_678,
                  missed_ticks=2, rejected_messages=3, commands=40, timing={"answer_ms_max": "1.0"})
    values.update(overrides)
    return DiagnosticsInput(**values)


def test_stats_count_and_refuse_unknown_counters():
    stats = PolicyStats(control_rate=50)
    stats["stale_ticks"] += 2
    assert stats["stale_ticks"] == 2 and math.isnan(stats["inference_ms"])
    with pytest.raises(KeyError):
        stats["no_such_counter"] = 1
    stats.chunk_added(12.5, np.array([0.1, 0.2, 0.3]))
    stats.chunk_timed(1)
    stats.chunk_timed(3)
    assert stats.chunks == 1 and stats["inference_ms"] == 12.5
    assert (stats["chunks_timed"], stats["chunk_latency_ticks"], stats["late_chunks"]) == (2, 4, 1)


def test_deadline_misses_count_ticks_more_than_one_and_a_half_periods_apart():
    stats = PolicyStats(control_rate=50)  # 20 ms period: misses above 30 ms
    for now in (0.0, 0.02, 0.049, 0.08, 0.2):
        stats.check_deadline(now)
    assert stats["deadline_misses"] == 2  # 0.049 -> 0.08 (31 ms) and 0.08 -> 0.2


def test_diagnostic_values_keep_their_keys_and_order():
    stats = PolicyStats(control_rate=50)
    values = stats.diagnostic_values(_diag_input())
    assert list(values)[:24] == [
        "state", "lifecycle", "waiting_for", "last_error", "instruction_refused", "inference_ms",
        "observation_age_ms", "ticks_without_fresh_chunk", "deadline_misses", "missed_ticks", "inference_failures",
        "stale_ticks", "pairs_joint_mismatch", "stale_chunks_dropped", "chunks_timed", "chunk_latency_ticks",
        "late_chunks", "rejected_images", "refused_instructions", "rejected_messages", "image_resubscriptions",
        "chunks", "commands", "memory_locked"]
    assert list(values)[24:28] == ["gc_pauses", "gc_max_ms", "gc_full", "gc_full_max_ms"]
    assert list(values)[28:] == ["answer_ms_max", "assist", "colour_gains"]
    assert values["inference_ms"] == "nan" and values["observation_age_ms"] == "12.3"
    assert values["instruction_refused"] == "no"
    assert values["waiting_for"] == "nothing" and values["last_error"] == "none"
    assert values["assist"] == "off" and values["colour_gains"] == "off" and "target_xyz_m" not in values
    assert _diag_input().observation_age_ns and stats.diagnostic_values(
        _diag_input(observation_age_ns=None))["observation_age_ms"] == "nan"


def test_diagnostic_values_with_the_assist_and_a_target_guess():
    stats = PolicyStats(control_rate=50)
    stats.chunk_added(3.0, np.array([0.5, -0.25, float("nan")]))
    aim = SimpleNamespace(shift=np.array([0.03, 0.04, 0.0]), largest_shift=0.07, misses=2,
                          reflex=SimpleNamespace(active=True, phase="lift"))
    balance = SimpleNamespace(last_gains=np.array([1.0, 0.5, 2.0]))
    values = stats.diagnostic_values(_diag_input(aim=aim, colour_balance=balance))
    assert values["target_xyz_m"] == "0.500 -0.250 nan"
    assert values["assist"] == "on" and values["colour_gains"] == "1.000 0.500 2.000"
    assert (values["aim_shift_cm"], values["aim_shift_cm_max"], values["grasps_reopened"]) == ("5.00", "7.00", "2")
    assert values["regrasp"] == "lift"
    aim.reflex = SimpleNamespace(active=False, phase="lift")
    assert stats.diagnostic_values(_diag_input(aim=aim))["regrasp"] == "-"
    aim.reflex = None
    assert stats.diagnostic_values(_diag_input(aim=aim))["regrasp"] == "policy"


def test_diagnostic_status_warns_on_bad_states_and_missing_inputs():
    stats = PolicyStats(control_rate=50)
    ok = diagnostic_status(stats.diagnostic_values(_diag_input(state="waiting")), [])
    assert ok.level == DiagnosticStatus.OK and ok.message == "waiting" and ok.name == "policy_node: inference"
    assert ok.hardware_id == "arm_act" and ok.values[0].key == "state"
    assert diagnostic_status(stats.diagnostic_values(_diag_input(state="stale")), []).level == DiagnosticStatus.WARN
    waiting = ["joint states on /joint_states"]
    status = diagnostic_status(stats.diagnostic_values(_diag_input(waiting=waiting)), waiting)
    assert status.level == DiagnosticStatus.WARN and status.message == "ok: waiting for joint states on /joint_states"


# ---------------------------------------------------------------- parameters
def test_parameter_changes_are_refused_by_when_they_may_change():
    assert set(LIVE_PARAMETERS) == {"execution", "ensemble_m", "ensemble_m_after_change", "ensemble_after_change_s",
                                    "gripper", "stale_timeout", "max_joint_speed"}
    assert not set(LIVE_PARAMETERS) & set(CONFIGURE_PARAMETERS)
    assert not set(CONFIGURE_PARAMETERS) & set(FIXED_PARAMETERS)
    assert "restart" in refusal("mode", "lockstep", "unconfigured")
    assert "configure" in refusal("checkpoint", "x", "active")
    assert "(it is inactive)" in refusal("assist", True, "inactive")
    assert refusal("checkpoint", "x", "unconfigured") is None
    assert refusal("stale_timeout", 0.5, "active") is None
    assert refusal("stale_timeout", -1.0, "active")  # out of its range
    assert refusal("stale_timeout", float("nan"), "active")
    assert refusal("execution", "sideways", "active")
    assert check_live_value("not_an_inference_parameter", object()) is None
    assert refusal("ensemble_m", -1.0, "active")  # m >= 0; after a change newer chunks may weigh more
    assert refusal("ensemble_m_after_change", -1.0, "active") is None
    assert refusal("ensemble_m_after_change", 11.0, "active")
    assert refusal("ensemble_after_change_s", 0.0, "active") is None
    assert refusal("ensemble_after_change_s", -0.5, "active")
    assert refusal("ensemble_after_change_s", float("inf"), "active")
    assert refusal("gripper", "continuous", "active") is None
    assert "one of ['binary', 'continuous']" in refusal("gripper", "half", "active")


def test_a_live_gripper_mode_applies_to_the_next_command():
    runtime = SimpleNamespace(gripper="binary")
    apply_live(SimpleNamespace(runtime=runtime, selector=None, control_rate=50), {"gripper": "continuous"})
    assert runtime.gripper == "continuous"


def test_a_live_ensemble_m_after_change_applies_from_the_next_change():
    runtime = SimpleNamespace(m_after_change=0.1, after_change_s=1.0, set_control_rate=lambda rate: None)
    node = SimpleNamespace(runtime=runtime, selector=None, control_rate=50)
    apply_live(node, {"ensemble_m_after_change": -1.0, "ensemble_after_change_s": 2.5})
    assert (runtime.m_after_change, runtime.after_change_s) == (-1.0, 2.5)


# ------------------------------------------------------------ InstructionCheck
def test_instruction_check_knows_the_families_of_its_vocabulary():
    from arm_act.common.instructions import family_vocab, longest_instruction
    from arm_act.nodes.instruction_check import InstructionCheck
    from arm_act.policy.vocab import default_vocab

    box = InstructionCheck(default_vocab(), 8)
    assert box.families == ("box",)
    assert box.verdict("Put the RED block in the box!", ["red", "blue"]) == ("put the red block in the box", "")
    assert box.verdict("place the red block in the box", None) == ("", "the policy was not trained on the word 'place'")
    assert "not trained on the relation task" in box.verdict("put the red block left of the blue block", None)[1]
    assert box.verdict("put the red block in the box", ["blue"])[1].startswith("no red block on the table")
    families = InstructionCheck(family_vocab(), longest_instruction())
    sentence = "put the red one on top of the blue one"
    assert families.verdict(sentence, None)[0] == sentence
    assert InstructionCheck(family_vocab(), 8).verdict("stack the red block on top of the blue block", None)[1] == \
        "10 words; the policy reads at most 8"


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), st.lists(st.sampled_from(
    ["put", "the", "red", "blue", "block", "in", "box", "on", "left", "of", "stack", "place", "x", "."]),
    max_size=12).map(" ".join)), colours=st.one_of(st.none(), st.lists(st.sampled_from(["red", "blue", "green"]))))
def test_instruction_check_never_crashes_and_never_guesses(text, colours):
    from arm_act.common.instructions import family_vocab
    from arm_act.nodes.instruction_check import InstructionCheck
    from arm_act.policy.vocab import default_vocab
    from arm_act.sim.instructions import parse_goal

    for vocab in (default_vocab(), family_vocab()):
        words, reason = InstructionCheck(vocab, 15).verdict(text, colours)
        assert bool(words) != bool(reason)  # a sentence to act on, or a reason, never both
        if words:  # everything the network reads is a word it was trained on, of a goal on the table
            assert set(words.split()) <= set(vocab) and parse_goal(words, colours)


# ------------------------------------------------------------ SilentInputs
def test_silent_subscriptions_are_made_again_with_a_growing_wait():
    from arm_act.nodes.silent_inputs import SilentInputs

    made, destroyed, warnings = [], [], []
    node = SimpleNamespace(destroy_subscription=destroyed.append,
                           get_logger=lambda: SimpleNamespace(warning=warnings.append))

    def create():
        made.append([f"sub{len(made)}a", f"sub{len(made)}b"])
        return made[-1]

    watch = SilentInputs(node, create, 2.0, "camera images")
    t0 = watch.since
    assert not watch.check(True, t0 + 1.9)  # not silent for long enough yet
    assert not watch.check(False, t0 + 10)  # the other inputs are silent too: nothing to blame on these
    assert watch.check(True, t0 + 2.1) and destroyed == ["sub0a", "sub0b"] and watch.subscriptions == ["sub1a", "sub1b"]
    assert "no camera images for 2.1 s" in warnings[0]
    assert not watch.check(True, t0 + 2.1 + 3.9)  # the wait doubled: 4 s
    assert watch.check(True, t0 + 2.1 + 4.0) and watch.resubscriptions == 2
    for _ in range(5):
        watch.check(True, watch.since + 1000)
    assert watch._backoff == 8  # at most 8x the timeout between tries
    watch.received()  # images again: the next silence waits the timeout once more
    assert watch._backoff == 1 and not watch.check(True, watch.since + 1.9)
    assert SilentInputs(node, create, 0.0, "x").check(True, 1e9) is False  # 0 turns it off
