"""sim_node's parts without ROS: the command input (CommandInbox) and its account per control
period (CommandPeriods), the peers the first episode waits for (RecorderReadiness, PeerWait),
the parameters read at start (sim_parameters) and the episode loop (SimLoop) on a fake world."""
from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from arm_act.nodes.loop_timing import LoopTiming
from arm_act.nodes.readiness import PeerWait, RecorderReadiness
from arm_act.nodes.sim_commands import CommandInbox, CommandPeriods
from arm_act.nodes.sim_loop import SimLoop
from arm_act.nodes.sim_pacing import StepGrid
from arm_act.nodes.sim_parameters import env_config_for_rates, read_settings, step_rate_for

pytestmark = pytest.mark.unit

POSE = np.arange(9.0)  # 7 arm joints, two fingers


class Logger:
    def __init__(self):
        self.lines: list[tuple[str, str]] = []

    def info(self, text, **kwargs):
        self.lines.append(("info", text))

    def warning(self, text, **kwargs):
        self.lines.append(("warning", text))


# ------------------------------------------------------------ CommandInbox
def test_a_missing_part_of_the_target_is_held_at_the_reset_pose_and_a_repeat_is_not_applied():
    inbox = CommandInbox()
    inbox.start_episode(POSE)
    assert inbox.target_to_apply() is None  # nothing received: the world holds its reset pose
    inbox.put_gripper(0.02)
    arm, gripper = inbox.target_to_apply()
    assert np.array_equal(arm, POSE[:7]) and gripper == 0.02
    command = np.full(7, 0.5)
    inbox.put_arm(command)
    arm, gripper = inbox.target_to_apply()
    assert arm is command and gripper == 0.02
    assert inbox.target_to_apply() is None  # unchanged
    inbox.put_arm(np.full(7, 0.5))  # a new command with the same values is a new target
    assert inbox.target_to_apply() is not None
    assert (inbox.arm_count, inbox.gripper_count) == (2, 1)


def test_a_new_episode_forgets_the_targets_and_a_reset_request_but_not_the_counts():
    inbox = CommandInbox()
    inbox.put_arm(np.zeros(7))
    inbox.put_gripper(0.0)
    inbox.request_reset()
    inbox.start_episode(POSE)
    assert (inbox.arm, inbox.gripper, inbox.reset_requested) == (None, None, False)
    assert (inbox.arm_count, inbox.gripper_count) == (1, 1)
    assert inbox.target_to_apply() is None


def test_the_trigger_services_pause_unpause_and_request_a_reset():
    inbox = CommandInbox()
    assert inbox.service("pause") == "paused" and inbox.paused
    assert inbox.service("unpause") == "running" and not inbox.paused
    assert inbox.service("reset") == "next episode starts" and inbox.reset_requested
    with pytest.raises(ValueError, match="no service 'stop'"):
        inbox.service("stop")


@pytest.mark.parametrize("pose", [np.zeros(7), np.zeros(0)])
def test_a_reset_pose_without_the_gripper_is_refused(pose):
    with pytest.raises(ValueError, match="7 arm joints and the gripper"):
        CommandInbox().start_episode(pose)


def test_a_tick_is_answered_once_both_commands_came_after_it():
    inbox = CommandInbox(clock=lambda: 42.0)
    inbox.put_arm(np.zeros(7))
    inbox.mark_tick()
    with inbox.lock:
        assert not inbox.tick_answered()
    inbox.put_arm(np.zeros(7))
    with inbox.lock:
        assert not inbox.tick_answered()
    inbox.put_gripper(0.0)
    with inbox.lock:
        assert inbox.tick_answered()
    assert inbox.arm_received_at == 42.0


def test_lockstep_waits_for_the_ticks_command_and_realtime_only_while_paused():
    inbox, stop = CommandInbox(), threading.Event()
    logger = Logger()
    assert inbox.wait_for_tick(stop, False, 10.0, logger, 0.0, resend=lambda: None)  # realtime: no wait

    def answer():
        time.sleep(0.05)
        inbox.put_arm(np.zeros(7))
        inbox.put_gripper(0.0)

    thread = threading.Thread(target=answer)
    thread.start()
    started = time.monotonic()
    assert inbox.wait_for_tick(stop, True, 10.0, logger, 0.0, resend=lambda: None)
    thread.join()
    assert time.monotonic() - started >= 0.04 and inbox.ticks_published == 1
    inbox.pause(True)
    threading.Timer(0.05, inbox.pause, args=(False,)).start()
    started = time.monotonic()
    assert inbox.wait_for_tick(stop, False, 10.0, logger, 0.0, resend=lambda: None)
    assert time.monotonic() - started >= 0.04
    threading.Timer(0.05, stop.set).start()
    assert not inbox.wait_for_tick(stop, True, 10.0, logger, 0.0, resend=lambda: None)  # no command: stopped
    assert not logger.lines


def test_lockstep_without_a_first_command_resends_the_tick_and_warns():
    inbox, stop, logger = CommandInbox(), threading.Event(), Logger()
    resent = []
    threading.Timer(1.6, stop.set).start()
    assert not inbox.wait_for_tick(stop, True, 1.2, logger, 1.25, resend=lambda: resent.append(1))
    assert resent == [1]  # after RESEND_EVERY_POLLS polls
    assert logger.lines and logger.lines[0][1].startswith("lockstep: no command for t=1.250 after 1 s")


# ------------------------------------------------------------ CommandPeriods
def test_periods_are_counted_from_the_first_tick_after_the_first_command():
    periods = CommandPeriods()
    periods.count(0, 10, paused=False, realtime=True)  # the episode starts: 10 commands before it
    periods.count(1, 10, paused=False, realtime=True)  # no command yet: the arm holds its reset pose
    assert periods.control_periods == 0
    periods.count(2, 11, paused=False, realtime=True)  # the first command: counting starts
    periods.count(3, 12, paused=False, realtime=True)  # one
    periods.count(4, 12, paused=False, realtime=True)  # none
    periods.count(5, 15, paused=False, realtime=True)  # three: two extra
    assert (periods.control_periods, periods.periods_without_command, periods.extra_commands) == (3, 1, 2)
    periods.count(6, 15, paused=True, realtime=True)  # a paused period is not counted
    periods.count(7, 16, paused=False, realtime=True)
    assert (periods.control_periods, periods.periods_without_command, periods.extra_commands) == (4, 1, 2)
    periods.count(0, 16, paused=False, realtime=True)  # a new episode: counting waits for its first command
    periods.count(1, 16, paused=False, realtime=True)
    assert periods.control_periods == 4


def test_lockstep_periods_are_not_counted():
    periods = CommandPeriods()
    for step, count in enumerate([0, 1, 1, 3]):
        periods.count(step, count, paused=False, realtime=False)
    assert (periods.control_periods, periods.periods_without_command, periods.extra_commands) == (0, 0, 0)


@pytest.mark.parametrize("step, count", [(-1, 0), (1, -1)])
def test_negative_steps_and_counts_are_refused(step, count):
    with pytest.raises(ValueError):
        CommandPeriods().count(step, count, paused=False, realtime=True)


def test_a_count_that_goes_back_is_refused():
    periods = CommandPeriods()
    periods.count(0, 0, paused=False, realtime=True)
    periods.count(1, 5, paused=False, realtime=True)
    with pytest.raises(ValueError, match="below"):
        periods.count(2, 4, paused=False, realtime=True)


# ------------------------------------------------------------ RecorderReadiness, PeerWait
class Graph:
    """A node's view of the graph: readers per topic (node name, namespace), writers per topic."""

    def __init__(self, readers: dict[str, list[tuple[str, str]]], writers: dict[str, int]):
        self.readers, self.writers = readers, writers

    def get_namespace(self):
        return "/"

    def get_subscriptions_info_by_topic(self, topic):
        return [SimpleNamespace(node_name=n, node_namespace=ns) for n, ns in self.readers.get(topic, [])]

    def count_publishers(self, topic):
        return self.writers.get(topic, 0)


class Writer:
    def __init__(self, matched: int):
        self.matched = matched

    def get_subscription_count(self):
        return self.matched


def test_the_recorder_is_missing_until_it_reads_every_topic_and_has_matched_every_writer():
    graph = Graph({"/clock": [("bag_recorder", "/")], "/cmd": [("bag_recorder", "/")],
                   "/js": [("viewer", "/")]}, {"/cmd": 2})
    ready = RecorderReadiness(graph, "/bag_recorder/publishers_matched")
    topics = {"/clock": Writer(1), "/js": Writer(1), "/cmd": None}
    missing = ready.missing("bag_recorder", True, topics)
    assert missing[0].startswith("bag_recorder's report on /bag_recorder/publishers_matched")
    assert missing[1] == "bag_recorder recording /js (wait_for_recorder)"
    ready.report('{"/cmd": 1}')
    (line,) = ready.missing("bag_recorder", True, topics)
    assert "/cmd (its reader has matched 1 of 2 publishers)" in line and "/js" in line
    graph.readers["/js"].append(("bag_recorder", "/"))
    assert ready.missing("bag_recorder", True, topics) == [
        "bag_recorder recording /cmd (its reader has matched 1 of 2 publishers), /js (wait_for_recorder)"]
    # Our writer has not matched the recorder's reader that the graph shows.
    ready.report('{"/cmd": 2}')
    assert ready.missing("bag_recorder", True, topics) == ["bag_recorder recording /js (wait_for_recorder)"]
    topics["/js"] = Writer(2)
    assert ready.missing("bag_recorder", True, topics) == []
    # A recorder that sends no report counts once its readers are in the graph.
    assert RecorderReadiness(graph, "x").missing("bag_recorder", False, topics) == []
    assert RecorderReadiness(graph, "x").missing("other", False, topics) == [
        "other recording /clock, /cmd, /js (wait_for_recorder)"]


@pytest.mark.parametrize("data", ["[1, 2]", "not json", '{"/cmd": "many"}', "3"])
def test_a_report_that_is_not_an_object_of_counts_is_refused_and_the_last_one_kept(data):
    ready = RecorderReadiness(Graph({}, {}), "t")
    ready.report('{"/cmd": 1}')
    with pytest.raises(ValueError):
        ready.report(data)
    assert ready.matches == {"/cmd": 1}


def test_peer_wait_says_what_is_missing_and_when_everything_is_here():
    answers = iter([["a controller"], ["a controller", "the recorder"], []])
    logger = Logger()
    wait = PeerWait(lambda: next(answers), logger, report_s=60.0, poll_s=0.001)
    assert wait.run(threading.Event()) is True
    assert wait.waiting == []
    assert logger.lines == [("info", "waiting for a controller"),
                            ("info", "everything the first episode waits for is here")]


def test_peer_wait_reports_again_after_report_s_and_stops():
    now = [0.0]
    logger, stop = Logger(), threading.Event()

    def missing():
        now[0] += 1.0
        if now[0] >= 5:
            stop.set()
        return ["a controller"]

    wait = PeerWait(missing, logger, report_s=2.0, poll_s=0.001, clock=lambda: now[0])
    assert wait.run(stop) is False and wait.waiting == ["a controller"]
    assert [t for _, t in logger.lines] == ["waiting for a controller"] * 3  # at 1, 3 and 5 s


def test_peer_wait_with_nothing_missing_logs_nothing():
    logger = Logger()
    assert PeerWait(lambda: [], logger).run(threading.Event()) and not logger.lines


@pytest.mark.parametrize("report_s, poll_s", [(-1.0, 0.05), (3.0, 0.0), (float("nan"), 0.05)])
def test_peer_wait_needs_sensible_periods(report_s, poll_s):
    with pytest.raises(ValueError):
        PeerWait(list, Logger(), report_s=report_s, poll_s=poll_s)


# ------------------------------------------------------------ sim_parameters
def test_the_step_rate_follows_the_mode_and_falls_back_to_the_control_rate():
    logger = Logger()
    assert step_rate_for("lockstep", 50, 100, 10, logger)[0] == 50
    step_rate, config = step_rate_for("realtime", 50, 100, 10, logger)
    assert step_rate == 100 and config.control_rate_hz == 100
    assert config.physics_dt == pytest.approx(env_config_for_rates(50, 50, 10).physics_dt)
    assert not logger.lines
    assert step_rate_for("realtime", 50, 75, 10, logger)[0] == 50
    ((level, text),) = logger.lines
    assert level == "warning" and "publishing joint states at the control rate" in text


def test_a_mode_other_than_realtime_or_lockstep_is_refused():
    with pytest.raises(ValueError, match="mode="):
        step_rate_for("fast", 50, 100, 10, Logger())


@pytest.mark.parametrize("step_rate", [75, 110])
def test_a_step_rate_off_the_control_and_camera_rates_is_refused(step_rate):
    with pytest.raises(ValueError, match="joint_state_rate"):
        env_config_for_rates(50, step_rate, 10)


PARAMETERS = dict(mode="realtime", real_time_factor=1.0, control_rate=50, joint_state_rate=100, camera_rate=10,
                  seed=7, blocks="2-5", episodes=3, reset_pause=1.0, lockstep_timeout=10.0, gui=False,
                  robustness="", episode_time_limit=12.0, thread_priority=0, task="box", instruction="")


def _node(**overrides):
    values = {**PARAMETERS, **overrides}
    logger = Logger()
    return SimpleNamespace(get_parameter=lambda name: SimpleNamespace(value=values[name]),
                           get_logger=lambda: logger)


def test_the_settings_read_at_start():
    settings = read_settings(_node())
    assert (settings.mode, settings.step_rate, settings.control_rate, settings.camera_rate) == ("realtime", 100, 50, 10)
    assert settings.config.episode_time_limit == 12.0 and settings.config.control_rate_hz == 100
    assert settings.schedule.episodes == 3 and settings.schedule.seed == 7
    assert read_settings(_node(mode="lockstep")).step_rate == 50


@pytest.mark.parametrize("overrides, match", [(dict(mode="fast"), "mode="),
                                              (dict(thread_priority=-5), "thread_priority"),
                                              (dict(blocks="five"), "blocks=")])
def test_bad_parameters_are_refused_with_the_reason(overrides, match):
    with pytest.raises(ValueError, match=match):
        read_settings(_node(**overrides))


# ------------------------------------------------------------ SimLoop on a fake world
class FakeEnv:
    def __init__(self, end_after: int | None, end_status: str = "success"):
        self.end_after, self.end_status = end_after, end_status
        self.steps = 0
        self.applied: list[tuple[int, np.ndarray, float]] = []
        self.renders: list[int] = []

    def reset(self, seed, n_blocks):
        self.steps = 0

    def step(self):
        self.steps += 1

    def status(self):
        return self.end_status if self.end_after is not None and self.steps >= self.end_after else "running"

    def render(self):
        self.renders.append(self.steps)
        return {"front": self.steps}

    def joint_state(self):
        return SimpleNamespace(position=POSE)

    def apply_command(self, arm, gripper):
        self.applied.append((self.steps, arm, gripper))


class Out:
    """Records the loop's publications as (what, step of the world, sim time); answers each
    control tick with a new arm and gripper command when `answer` is set."""

    def __init__(self, answer: bool = True, reset_at: int | None = None):
        self.loop: SimLoop | None = None
        self.answer, self.reset_at = answer, reset_at
        self.calls: list[tuple] = []

    def observation(self, step, resend=False):
        images = self.loop.camera_images(step, resend)
        self.calls.append(("observation", step, round(self.loop.sim_time, 6), images, resend))
        if self.answer and not resend:
            self.loop.commands.put_arm(np.full(7, float(step)))
            self.loop.commands.put_gripper(0.04)
        if step == self.reset_at:
            self.loop.commands.request_reset()

    def joint_state(self, clock=True):
        self.calls.append(("joint_state", self.loop.env.steps, round(self.loop.sim_time, 6)))

    def joint_state_later(self):
        return ("made", self.loop.env.steps, round(self.loop.sim_time, 6))

    def publish_later(self, made):
        self.calls.append(("joint_state_later", *made[1:]))

    def episode_ended(self, state):
        self.calls.append(("ended", state, round(self.loop.sim_time, 6)))


def _loop(env, out, mode="realtime", factor=0.0, control_rate=50, step_rate=100, camera_rate=10,
          reset_pause=0.05, start=100.0):
    grid = StepGrid(step_rate // control_rate, step_rate // camera_rate)
    loop = SimLoop(env, grid, out, mode=mode, real_time_factor=factor, control_rate=control_rate,
                   step_rate=step_rate, reset_pause=reset_pause, lockstep_timeout=10.0, commands=CommandInbox(),
                   periods=CommandPeriods(), timing=LoopTiming(), stop=threading.Event(), logger=Logger(),
                   counted=lambda: True, start_time=start)
    out.loop = loop
    return loop


def test_lockstep_publishes_every_tick_and_applies_each_new_command_once():
    env, out = FakeEnv(end_after=7), Out()
    loop = _loop(env, out, mode="lockstep", step_rate=50, factor=1.0)
    loop.start_episode(seed=1, n_blocks=2)
    loop.run_episode()
    observations = [c for c in out.calls if c[0] == "observation"]
    assert [c[1] for c in observations] == list(range(7))
    assert [c[2] for c in observations] == [round(100.0 + s / 50, 6) for s in range(7)]
    assert [c[3] is not None for c in observations] == [s % 5 == 0 for s in range(7)]  # camera ticks
    assert out.calls[-1] == ("ended", "success", 100.14)
    assert not any(c[0] == "joint_state" for c in out.calls)  # lockstep: the ticks only
    assert [a[0] for a in env.applied] == list(range(7)) and env.applied[3][1][0] == 3.0
    assert loop.sim_time == pytest.approx(100.16)  # the next episode starts a control period later
    assert loop.periods.control_periods == 0  # counted in realtime only


def test_realtime_publishes_joint_states_between_ticks_and_holds_onto_the_grid():
    env, out = FakeEnv(end_after=7, end_status="failure"), Out()
    loop = _loop(env, out)
    loop.start_episode(seed=1, n_blocks=2)
    loop.run_episode()
    kinds = [(c[0], c[1]) for c in out.calls[:7]]
    assert kinds == [("observation", 0), ("joint_state", 1), ("observation", 2), ("joint_state", 3),
                     ("observation", 4), ("joint_state", 5), ("observation", 6)]
    # The end: the final joint state, the episode, then the hold (5 steps: 7 + 5 ends on the grid).
    assert out.calls[7] == ("joint_state", 7, 100.07) and out.calls[8] == ("ended", "failure", 100.07)
    hold = out.calls[9:]
    assert [c[1] for c in hold] == [8, 9, 10, 11, 12] and hold[-1][2] == pytest.approx(100.12)
    assert loop.sim_time == pytest.approx(100.14) and round((loop.sim_time - 100.0) * 50, 6) % 1 == 0
    # A command that answers a tick is applied at once, each one once.
    assert [a[0] for a in env.applied] == [0, 2, 4, 6]
    periods = loop.periods
    assert (periods.control_periods, periods.periods_without_command, periods.extra_commands) == (2, 0, 0)


def test_realtime_counts_a_period_without_a_command():
    env, out = FakeEnv(end_after=12), Out()
    loop = _loop(env, out, reset_pause=0.0)
    loop.start_episode(seed=1, n_blocks=2)
    out.answer = True
    original = out.observation

    def observation(step, resend=False):  # the tick at step 6 goes unanswered
        out.answer = step != 6
        original(step, resend)

    out.observation = observation
    loop.run_episode()
    periods = loop.periods
    assert (periods.control_periods, periods.periods_without_command) == (4, 1)


def test_a_reset_request_ends_the_episode_as_a_failure_after_the_step():
    env, out = FakeEnv(end_after=None), Out(reset_at=4)
    loop = _loop(env, out, reset_pause=0.0)
    loop.start_episode(seed=1, n_blocks=2)
    loop.run_episode()
    assert ("ended", "failure", 100.05) in out.calls
    assert env.steps == 6  # one step of hold brings the next episode back onto the control-period grid


def test_stop_ends_a_lockstep_episode_that_waits_for_its_command():
    env, out = FakeEnv(end_after=None), Out(answer=False)
    loop = _loop(env, out, mode="lockstep", step_rate=50)
    loop.start_episode(seed=1, n_blocks=2)
    threading.Timer(0.1, loop.stop.set).start()
    loop.run_episode()
    assert [c[:2] for c in out.calls] == [("observation", 0)] and env.steps == 0


def test_paced_the_step_before_a_camera_tick_runs_ahead_and_every_joint_state_goes_out_in_order():
    env, out = FakeEnv(end_after=12), Out()
    loop = _loop(env, out, factor=1.0, camera_rate=50, reset_pause=0.0)
    loop.start_episode(seed=1, n_blocks=2)
    started = time.monotonic()
    loop.run_episode()
    assert time.monotonic() - started >= 0.1  # 12 steps of 10 ms on the wall clock
    published = [c for c in out.calls if c[0] != "ended"]
    assert [c[0] for c in published[:4]] == ["observation", "joint_state_later", "observation", "joint_state_later"]
    stamps = [c[2] for c in published]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)
    assert [round((s - 100.0) * 100) for s in stamps] == list(range(len(stamps)))
    # Every camera tick after the first was rendered ahead, at the step before it.
    assert env.renders[:3] == [0, 2, 4]


@pytest.mark.parametrize("kwargs", [dict(mode="fast"), dict(step_rate=75), dict(control_rate=40)])
def test_a_loop_with_an_unknown_mode_or_rates_off_its_grid_is_refused(kwargs):
    env, out = FakeEnv(end_after=1), Out()
    grid = StepGrid(2, 10)
    args = dict(mode="realtime", real_time_factor=0.0, control_rate=50, step_rate=100, reset_pause=0.0,
                lockstep_timeout=1.0, commands=CommandInbox(), periods=CommandPeriods(), timing=LoopTiming(),
                stop=threading.Event(), logger=Logger(), counted=lambda: True, start_time=0.0)
    with pytest.raises(ValueError):
        SimLoop(env, grid, out, **{**args, **kwargs})
