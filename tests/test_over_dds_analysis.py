"""The bench's command-delivery figures (arm_act/bench/over_dds.py analyse): the probe's
receipt-order sim time, the sim time each command was sent in (DDS source timestamps), and
sim_node's own count of control periods without a new command."""
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arm_act.bench import over_dds
from arm_act.bench.realtime_summary import summarize

MS = 1_000_000


class Probe:
    cameras = ("front", "wrist")

    def __init__(self):
        self.lock = threading.Lock()
        self.commands, self.pairs, self.chunks = [], {}, {}
        self.clock_samples, self.inference_ms = [], []
        self.clock_sent, self.command_sent_ns, self.sim_diagnostics = [], [], []
        self.episode_end_sent_ns = []


def _run(late_clock_ticks=(), skipped_ticks=(), ticks=100, delayed_ticks=(), steal=(), counters=()):
    """A 20 ms control loop over a 10 ms /clock, as the probe records it. Each tick's command
    is sent 3 ms after its /clock (source times: wall ns of the publisher). Normally the probe
    takes /clock then the command; for late_clock_ticks it takes the command first (another
    DDS reader), so the receipt-order label is the previous 10 ms step. skipped_ticks: no
    command at all. delayed_ticks: sent on time, received 15 ms late (delivery, or the probe's
    own executor). sim_node's diagnostics count the periods without a command."""
    probe = Probe()
    without = 0
    for step in range(2 * ticks + 2):
        # sim_node's clock is float seconds rounded to the ns: steps are 10 ms +- 1 ns.
        sim_ns, wall = step * 10 * MS - step % 2, 10.0 + step * 0.010
        tick, on_tick = divmod(step, 2)
        clock = (wall + 0.0005, int(wall * 1e9), sim_ns)  # (received, sent, sim)
        command = None
        if on_tick == 0 and tick not in skipped_ticks:
            command = (wall + 0.004 + 0.015 * (tick in delayed_ticks), int((wall + 0.003) * 1e9))
        events = [("clock", clock[0], clock)] + ([("command", command[0], command)] if command else [])
        if tick in late_clock_ticks and command and on_tick == 0:
            events = [("command", clock[0] - 0.0001, command), ("clock", command[0], clock)]
        for kind, _, item in sorted(events, key=lambda e: e[1]):
            if kind == "clock":
                probe.clock_ns = item[2]
                probe.clock_samples.append((item[0], item[2]))
                probe.clock_sent.append((item[1], item[2]))
            else:
                label = probe.clock_ns if hasattr(probe, "clock_ns") else -1
                probe.commands.append((item[0], label, 0))
                probe.command_sent_ns.append(item[1])
        if on_tick == 0 and tick > 0 and (tick - 1) in skipped_ticks:
            without += 1
        if step % 20 == 0:  # sim_node's diagnostics, every 200 ms here
            probe.sim_diagnostics.append((wall + 0.001, {
                "periods_without_command": str(without), "extra_commands": "0",
                "control_periods": str(max(tick, 0)), "sim_time": f"{sim_ns / 1e9:.3f}"}))
    return over_dds.analyse(probe, start=10.0, end=10.0 + 2 * ticks * 0.010 + 0.02, steal=steal, counters=counters)


@pytest.mark.unit
def test_a_command_taken_before_its_clock_is_the_old_artifact_and_no_miss():
    result = _run(late_clock_ticks=(30, 70))
    # The receipt-order label puts ticks 30 and 70 10 ms early: periods 10 then 30 ms (+ 1 ns),
    # and the 30 ms period rounds to one "missed" tick each (round(1.5) == 2).
    assert result["missed_ticks_sim"] == 2
    assert result["commands_received_before_their_clock"] == 2
    # By publication order every period is 20 ms, and sim_node saw a command in every period.
    assert result["missed_ticks_sim_sent"] == 0
    assert result["control_period_sim_sent_p99_ms"] == pytest.approx(20.0)
    assert result["missed_ticks_at_sim"] == 0
    assert result["control_periods_at_sim"] > 80


@pytest.mark.unit
def test_a_skipped_command_is_counted_by_every_figure():
    result = _run(skipped_ticks=(40,))
    assert result["missed_ticks_sim"] == result["missed_ticks_sim_sent"] == result["missed_ticks_wall"] == 1
    assert result["missed_ticks_wall_sent"] == 1
    assert [(p["received_ms"], p["sent_ms"]) for p in result["late_periods"]] == [(40.0, 40.0)]
    assert result["commands_received_before_their_clock"] == 0
    assert result["missed_ticks_at_sim"] == 1
    lines = "\n".join(summarize({**result, "label": "x", "ros_camera_rate_hz": 10, "ros_backend": "onnx",
                                 "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                 "machine": {"load_average_1m_start": 1.0}}))
    assert "control periods with no new arm command 1" in lines
    assert "target missed_ticks_at_sim == 0: 1 -> NOT met" in lines
    assert "target missed_ticks_sim_sent == 0: 1 -> NOT met" in lines


@pytest.mark.unit
def test_the_sim_time_target_is_counted_in_publication_order_not_receipt_order():
    result = _run(late_clock_ticks=(30, 70))
    lines = "\n".join(summarize({**result, "label": "x", "ros_camera_rate_hz": 10, "ros_backend": "onnx",
                                 "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                 "machine": {"load_average_1m_start": 1.0}}))
    assert "target missed_ticks_sim_sent == 0: 0 -> met" in lines  # the receipt-order artefact is no miss
    assert "target missed_ticks_sim == " not in lines
    assert "commands received before their tick's /clock 2" in lines  # still shown


@pytest.mark.unit
def test_sim_figures_are_null_without_sim_diagnostics_and_old_results_print_as_before():
    probe = Probe()
    probe.commands = [(10.0 + 0.02 * i, 20 * MS * i, 0) for i in range(10)]
    result = over_dds.analyse(probe, start=10.0, end=11.0)
    assert result["missed_ticks_at_sim"] is None and result["missed_ticks_sim_sent"] is None
    assert result["missed_ticks_sim"] == 0
    old = {k: v for k, v in result.items() if k in ("control_period_sim_p50_ms", "control_period_sim_p99_ms",
                                                       "missed_ticks_sim", "control_period_wall_p50_ms",
                                                       "control_period_wall_p99_ms", "missed_ticks_wall",
                                                       "control_periods", "ros_seconds")}
    old.update(label="old", ros_rtf=1.0, ros_camera_rate_hz=10, ros_backend="onnx", obs_to_command_ms_p50=20.0,
               obs_to_command_ms_p99=24.0, machine={"load_average_1m_start": 1.0})
    lines = "\n".join(summarize(old))
    assert "at sim_node" not in lines and "missed_ticks_at_sim" not in lines
    assert "target missed_ticks_sim == 0: 0 -> met" in lines  # old results: the figure they have


@pytest.mark.unit
def test_an_episodes_last_command_sent_during_the_hold_burst_is_no_miss():
    """sim_node ends the episode at tick 50 and runs its hold ahead of the wall clock: /clock
    steps 1 ms apart. The last command (answering tick 49) is sent after the end and after
    /clock had raced 30 ms on; the probe still takes it inside the episode."""
    probe = Probe()
    for tick in range(50):
        wall, sim_ns = 10.0 + tick * 0.020, tick * 20 * MS + 1
        probe.clock_samples.append((wall + 0.0005, sim_ns))
        probe.clock_sent.append((int(wall * 1e9), sim_ns))
        if tick < 49:
            probe.commands.append((wall + 0.004, sim_ns, 0))
            probe.command_sent_ns.append(int((wall + 0.003) * 1e9))
    last_wall = 10.0 + 49 * 0.020
    probe.episode_end_sent_ns.append(int((last_wall + 0.002) * 1e9))
    for k in range(1, 5):  # the hold: 10 ms sim steps 1 ms apart
        sim_ns = 49 * 20 * MS + k * 10 * MS
        probe.clock_sent.append((int((last_wall + 0.002 + k * 0.001) * 1e9), sim_ns))
        probe.clock_samples.append((last_wall + 0.0025 + k * 0.001, sim_ns))
    probe.commands.append((last_wall + 0.007, 49 * 20 * MS + 40 * MS, 0))  # receipt label: after the burst
    probe.command_sent_ns.append(int((last_wall + 0.0065) * 1e9))
    result = over_dds.analyse(probe, start=10.0, end=12.0)
    assert result["missed_ticks_sim"] == 2  # the old figure: a 60 ms period
    assert result["missed_ticks_sim_sent"] == 0
    assert result["control_periods"] == 49 and result["control_period_sim_sent_p99_ms"] == pytest.approx(20.0)
    probe.episode_end_sent_ns.clear()  # without the end the same labels make the miss
    assert over_dds.analyse(probe, start=10.0, end=12.0)["missed_ticks_sim_sent"] == 2


@pytest.mark.unit
def test_a_pair_whose_episode_ended_before_its_chunk_has_no_latency():
    """An episode's last camera pair: its chunk comes after the episode's last command, and the
    next command is the next episode's, a 1 s hold later. It is counted apart, not as a 1 s
    latency; the next episode's first pair (whose command comes after its first chunk) is a
    latency."""
    probe = Probe()
    wall0 = 10.0
    for episode, (first_tick, last_tick) in enumerate(((0, 49), (100, 149))):
        for tick in range(first_tick, last_tick + 1):
            sim_ns, wall = tick * 20 * MS, wall0 + tick * 0.020
            probe.clock_samples.append((wall + 0.0005, sim_ns))
            probe.clock_sent.append((int(wall * 1e9), sim_ns))
            probe.commands.append((wall + 0.004, sim_ns, episode))
            probe.command_sent_ns.append(int((wall + 0.003) * 1e9))
        end_ns = (last_tick + 1) * 20 * MS  # sim_node ends the episode at the next step
        probe.clock_sent.append((int((wall0 + (last_tick + 1) * 0.020) * 1e9), end_ns))
        probe.episode_end_sent_ns.append(int((wall0 + (last_tick + 1) * 0.020 + 0.0002) * 1e9))
    def pair(tick, chunk_after):
        wall = wall0 + tick * 0.020
        key = over_dds._key(tick * 20 * MS)
        probe.pairs[key] = {"front": wall + 0.001, "wrist": wall + 0.0012}
        probe.chunks[key] = wall + 0.0012 + chunk_after
    pair(45, 0.006)   # an ordinary pair: its command at the next tick
    pair(49, 0.017)   # the episode's last pair: its chunk after the episode's last command
    pair(100, 0.006)  # the next episode's first pair
    result = over_dds.analyse(probe, start=wall0, end=wall0 + 150 * 0.020)
    assert result["obs_to_command_pairs_after_episode_end"] == 1
    assert result["obs_to_command_pairs"] == 2
    assert result["obs_to_command_ms_p99"] == pytest.approx(22.8, abs=0.5)  # 20 ms tick - 1.2 + 4 ms


@pytest.mark.unit
def test_a_command_sent_on_time_and_received_late_is_late_at_receipt_only():
    result = _run(delayed_ticks=(50,))
    # Received 15 ms late: periods of 35 then 5 ms at the probe, one missed tick there ...
    assert result["missed_ticks_wall"] == 1
    # ... but it left policy_node on time, and sim_node's clock label is unchanged.
    assert result["missed_ticks_wall_sent"] == 0
    assert result["control_period_wall_sent_p99_ms"] == pytest.approx(20.0, abs=0.01)
    assert result["missed_ticks_sim_sent"] == 0 and result["missed_ticks_at_sim"] == 0
    [late] = result["late_periods"]
    assert late["received_ms"] == pytest.approx(35.0, abs=0.01) and late["sent_ms"] == pytest.approx(20.0, abs=0.01)
    lines = "\n".join(summarize({**result, "label": "x", "ros_camera_rate_hz": 10, "ros_backend": "onnx",
                                 "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                 "probe_gc_pauses": 3, "probe_gc_max_ms": 0.1,
                                 "machine": {"load_average_1m_start": 1.0}}))
    assert "period wall as sent (policy_node's write times) p99 20.00 ms, missed 0" in lines
    assert "late period at" in lines and "received 35.0 ms, sent 20.0 ms" in lines


@pytest.mark.unit
def test_the_steal_fraction_is_the_hosts_share_of_the_window():
    before = [100, 0, 50, 1000, 5, 0, 1, 10, 0, 0]
    after = [300, 0, 50, 1500, 5, 0, 1, 110, 0, 0]  # 800 ticks in all, 100 of them stolen
    assert over_dds.steal_fraction(before, after) == pytest.approx(0.125)
    assert over_dds.steal_fraction(None, after) is None
    assert over_dds.steal_fraction(before, before) is None  # no time passed
    assert over_dds.steal_fraction([1, 2, 3], [4, 5, 6]) is None  # a kernel without the steal column
    now = over_dds.cpu_times()
    assert now is None or (len(now) >= 8 and all(x >= 0 for x in now))


@pytest.mark.unit
def test_late_periods_are_matched_with_the_steal_around_them():
    # Readings every 50 ms from t=0 to 1 s; the host took 30 ms between 0.40 and 0.45 s only.
    steal = [(0.05 * i, 100.0 + 30.0 * (i >= 9)) for i in range(21)]
    spans = [(0.02 * i, 0.02 * (i + 1)) for i in range(49)]  # every 20 ms period of the second
    late = [(0.41, 0.44), (0.80, 0.83)]  # one inside the burst, one in a quiet stretch
    got = over_dds.steal_near_late(steal, spans, late)
    assert got["late_periods_with_steal"] == 1 and got["late_periods_sampled"] == 2
    # The periods whose readings bracket 0.40-0.45 s: 0.40-0.42, 0.42-0.44 and 0.44-0.46.
    assert got["periods_with_steal_share"] == pytest.approx(3 / 49, abs=1e-4)
    assert got["steal_ms_max_per_sample"] == 30.0
    assert got["steal_ms_mean_late_period"] == 15.0 and got["steal_ms_mean_period"] == pytest.approx(90 / 49, abs=0.01)
    # A period outside the readings is not counted either way; too few readings: no figures.
    assert over_dds.steal_near_late(steal, spans, [(1.2, 1.25)])["late_periods_sampled"] == 0
    assert over_dds.steal_near_late(steal[:1], spans, late) == {}
    assert over_dds.stolen_ms([0] * 7 + [250]) == pytest.approx(250 * 1e3 / os.sysconf("SC_CLK_TCK"))
    assert over_dds.stolen_ms([1, 2, 3]) is None and over_dds.stolen_ms(None) is None


@pytest.mark.unit
def test_analyse_counts_the_steal_around_its_late_periods():
    # _run's ticks are 20 ms apart from wall 10.0 s; tick 40's command is received 15 ms late
    # (~10.819 s): late periods 35 ms into tick 40 and 5 ms out of it.
    assert "late_periods_with_steal" not in _run(delayed_ticks=(40,))  # no readings, no figures
    quiet = [(9.9 + 0.05 * i, 0.0) for i in range(60)]
    burst = [(t, 10.0 * (t > 10.80)) for t, _ in quiet]  # 10 ms stolen between 10.80 and 10.85 s
    assert _run(delayed_ticks=(40,), steal=quiet)["late_periods_with_steal"] == 0
    result = _run(delayed_ticks=(40,), steal=burst)
    assert result["late_periods_with_steal"] == result["late_periods_sampled"] == len(result["late_periods"]) >= 1
    assert 0 < result["periods_with_steal_share"] < 0.05
    lines = "\n".join(summarize({**result, "label": "x", "ros_camera_rate_hz": 10, "ros_backend": "onnx",
                                  "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                  "machine": {"load_average_1m_start": 1.0}}))
    assert f"late periods with CPU stolen by the host during them: {result['late_periods_sampled']} of" in lines
    assert "late periods with no CPU stolen around them (the project's own): 0" in lines
    quiet_lines = "\n".join(summarize({**_run(delayed_ticks=(40,), steal=quiet), "label": "x",
                                        "ros_camera_rate_hz": 10, "ros_backend": "onnx", "ros_rtf": 1.0,
                                        "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                        "machine": {"load_average_1m_start": 1.0}}))
    assert f"(the project's own): {result['late_periods_sampled']}" in quiet_lines


@pytest.mark.unit
def test_other_counters_are_matched_with_the_late_periods_too():
    # Readings every 50 ms: policy_node's minor faults jump by 400 between 10.80 and 10.85 s
    # (tick 40's late command), kdamond's CPU moves 1 ms every reading, sim_node's faults never.
    times = [9.9 + 0.05 * i for i in range(60)]
    counters = [(t, {"minor_faults:policy_node": 1000.0 + 400.0 * (t > 10.80), "kdamond_ms": 5.0 + i,
                     "minor_faults:sim_node": 7.0, "minor_faults:gone": None}) for i, t in enumerate(times)]
    result = _run(delayed_ticks=(40,), counters=counters)
    got = result["late_period_counters"]
    late = len(result["late_periods"])
    assert late >= 1 and set(got) == {"minor_faults:policy_node", "kdamond_ms", "minor_faults:sim_node"}
    assert got["minor_faults:policy_node"]["late_with"] == got["minor_faults:policy_node"]["late_sampled"] == late
    assert 0 < got["minor_faults:policy_node"]["all_share"] < 0.05
    assert got["minor_faults:policy_node"]["mean_late"] == 400.0
    assert got["kdamond_ms"]["all_share"] == 1.0 and got["kdamond_ms"]["late_with"] == late
    assert got["minor_faults:sim_node"]["late_with"] == 0 and got["minor_faults:sim_node"]["all_share"] == 0.0
    assert _run(delayed_ticks=(40,))["late_period_counters"] is None  # no readings, no figures
    lines = "\n".join(summarize({**result, "label": "x", "ros_camera_rate_hz": 10, "ros_backend": "onnx",
                                  "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 24.0,
                                  "machine": {"load_average_1m_start": 1.0}}))
    assert f"minor_faults:policy_node moved around {late} of {late} late periods" in lines


@pytest.mark.unit
@given(st.lists(st.tuples(st.floats(0, 100, allow_nan=False), st.floats(-1e6, 1e6, allow_nan=False)), max_size=30),
       st.lists(st.tuples(st.floats(-10, 110, allow_nan=False), st.floats(0, 0.1)), max_size=20))
@settings(max_examples=200, deadline=None)
def test_counters_near_late_never_fails_on_any_readings(readings, periods):
    readings = sorted(readings)
    spans = [(t, t + d) for t, d in periods]
    got = over_dds.counters_near_late([(t, {"c": v}) for t, v in readings], spans, spans[:3])
    if len(readings) < 2:
        assert got == {}
        return
    c = got["c"]
    assert 0 <= c["late_with"] <= c["late_sampled"] <= min(3, len(spans))
    assert c["all_share"] is None or 0.0 <= c["all_share"] <= 1.0


@pytest.mark.unit
def test_the_late_counters_read_real_processes():
    values = over_dds.late_counters_sample({"me": os.getpid(), "gone": 2**22 + 12345}, [])
    assert values["minor_faults:me"] > 0 and values["minor_faults:gone"] is None and "kdamond_ms" not in values
    kernel = over_dds._kernel_thread_pids()
    if kernel:  # a kernel running DAMON: its threads' CPU is read too
        assert over_dds.late_counters_sample({}, kernel)["kdamond_ms"] >= 0


@pytest.mark.unit
def test_the_kernels_proactive_reclaim_is_recorded_and_printed(tmp_path):
    from arm_act.bench.suite import kernel_damon

    assert kernel_damon(tmp_path / "no_damon") is None
    scheme = tmp_path / "0" / "contexts" / "0" / "schemes" / "0"
    scheme.mkdir(parents=True)
    (tmp_path / "0" / "state").write_text("on\n")
    (scheme / "action").write_text("pageout\n")
    (tmp_path / "1" / "contexts" / "0").mkdir(parents=True)
    (tmp_path / "1" / "state").write_text("off\n")
    (tmp_path / "nr_kdamonds").write_text("2\n")
    assert kernel_damon(tmp_path) == ["on: pageout", "off: monitoring only"]
    report = {"label": "r", "ros_seconds": 60.0, "ros_rtf": 1.0, "ros_camera_rate_hz": 10, "ros_backend": "onnx",
              "control_period_sim_p50_ms": 20.0, "control_period_sim_p99_ms": 20.0, "missed_ticks_sim": 0,
              "control_period_wall_p50_ms": 20.0, "control_period_wall_p99_ms": 21.0, "missed_ticks_wall": 0,
              "control_periods": 3000, "obs_to_command_ms_p50": 20.0, "obs_to_command_ms_p99": 22.0,
              "machine": {"load_average_1m_start": 1.0, "kernel_damon": ["on: pageout"]}}
    assert "kernel DAMON on: pageout" in summarize(report)[0]
    report["machine"]["kernel_damon"] = None
    assert "DAMON" not in summarize(report)[0]


@pytest.mark.unit
def test_major_page_faults_are_counted_per_process_over_the_window():
    me = {"self": os.getpid()}
    before = over_dds.cpu_snapshot(me)
    assert isinstance(before["major_faults"]["self"], int) and before["major_faults"]["self"] >= 0
    after = {**before, "major_faults": {"self": before["major_faults"]["self"] + 3}}
    assert over_dds.major_faults(before, after) == {"self": 3}
    gone = over_dds.cpu_snapshot({"gone": 2 ** 22 + 12345})  # no such process: nothing to count
    assert over_dds.major_faults(gone, gone) == {}
