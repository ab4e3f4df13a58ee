"""The policy node's control period and observation-to-command latency over DDS, for
`arm-act bench`: sim_node and policy_node run as child processes (as `arm-act demo` starts
them) in a private localhost domain, and a probe node in this process records every command,
/clock, camera image and chunk as it arrives. What each figure means, and why each is
measured the way it is, is in benchmarks/README.md ("What the DDS run measures")."""
from __future__ import annotations

import bisect
import gc
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

WARMUP_S = 1.0
STARTUP_TIMEOUT_S = 120.0  # two processes importing torch / PyBullet on a loaded machine
CONTROL_RATE = 50

ROS_KEYS = ("control_period_p50_ms", "control_period_p99_ms", "missed_ticks",
            "control_period_wall_p50_ms", "control_period_wall_p99_ms", "missed_ticks_wall",
            "control_period_sim_p50_ms", "control_period_sim_p99_ms", "missed_ticks_sim",
            "control_periods", "obs_to_command_ms_p50", "obs_to_command_ms_p99",
            "obs_to_command_pairs", "obs_to_command_pairs_after_episode_end", "ros_seconds", "ros_rtf",
            "ros_camera_rate_hz",
            "ros_backend", "ros_node_inference_ms_p50", "ros_sim_seconds", "ros_cpu_s_per_sim_s",
            "ros_cpu_threads_s_per_sim_s", "camera_pairs", "camera_pairs_inferred", "ros_thread_priority",
            "ros_sched_fifo_threads", "ros_realtime_tuning", "control_period_sim_sent_p50_ms",
            "control_period_sim_sent_p99_ms", "missed_ticks_sim_sent", "commands_received_before_their_clock",
            "missed_ticks_at_sim", "extra_commands_at_sim", "control_periods_at_sim", "at_sim_seconds",
            "control_period_wall_sent_p99_ms", "missed_ticks_wall_sent", "late_periods",
            "probe_gc_pauses", "probe_gc_max_ms", "steal_fraction", "late_periods_with_steal",
            "late_periods_sampled", "periods_with_steal_share", "steal_ms_mean_late_period", "steal_ms_mean_period",
            "steal_ms_max_per_sample", "late_period_counters", "ros_node_gc", "window_start_monotonic_s",
            "ros_sim_loop")


def _key(stamp_ns: int) -> int:
    """Stamps go through float seconds in action_chunk_msg: match them at 0.1 ms."""
    return int(round(stamp_ns / 1e5))


class _Probe:
    """Subscriptions of the probe node; callbacks only record arrival times."""

    def __init__(self, context, cameras: tuple[str, ...]):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.node import Node
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import Image
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory

        from arm_act.ros import conversions as conv
        from arm_act.ros.qos import SENSOR_DATA, TRANSIENT_LOCAL

        self.conv = conv
        self.node = Node("bench_probe", context=context)
        self.cameras = cameras
        self.lock = threading.Lock()
        self.clock_ns = -1
        self.clock_samples: list[tuple[float, int]] = []  # (wall s, sim ns)
        self.running_episode: int | None = None
        self.commands: list[tuple[float, int, int | None]] = []  # (wall s, sim ns, episode)
        # DDS source timestamps (the publisher's write time, ns), aligned with clock_samples and
        # commands: which /clock was published before a command ("Sim time sent", above).
        self.clock_sent: list[tuple[int, int]] = []  # (source ns, sim ns)
        self.command_sent_ns: list[int] = []
        self.episode_end_sent_ns: list[int] = []  # source ns of each "episode ended" message
        self.sim_diagnostics: list[tuple[float, dict[str, str]]] = []  # (wall s, sim_node's values)
        self.policy_answers: dict[str, str] = {}  # policy_node's newest AnswerTiming values
        self.pairs: dict[int, dict[str, float]] = {}  # stamp key -> {camera: wall s}
        self.chunks: dict[int, float] = {}  # stamp key -> wall s
        self.inference_ms: list[tuple[float, float]] = []  # (wall s, node's inference ms)
        self.node_gc: dict[str, dict[str, str]] = {}  # node -> its newest gc_pauses / gc_max_ms
        sub = self.node.create_subscription
        sub(Clock, "/clock", self.clock_callback, 10)
        sub(Float64MultiArray, conv.ARM_COMMAND_TOPIC, self.command_callback, 10)
        sub(String, "episode", self.episode_callback, TRANSIENT_LOCAL)
        # Raw: only the header stamps are read (conv.header_stamp_ns), so the probe's own CPU,
        # which the nodes share two cores with, is not spent deserializing 50-point chunks
        # and images (0.7 ms per chunk).
        sub(JointTrajectory, "policy/action_chunk", self.chunk_callback, 10, raw=True)
        sub(DiagnosticArray, "policy/diagnostics", self.diagnostics_callback, 10)
        sub(DiagnosticArray, "sim/diagnostics", self.sim_diagnostics_callback, 10)
        for camera in cameras:
            sub(Image, f"camera/{camera}/image_raw",
                lambda msg, c=camera: self.image_callback(c, msg), SENSOR_DATA, raw=True)

    def clock_callback(self, msg, info) -> None:
        now = time.monotonic()
        with self.lock:
            self.clock_ns = self.conv.stamp_to_ns(msg.clock)
            self.clock_samples.append((now, self.clock_ns))
            self.clock_sent.append((int(info["source_timestamp"]), self.clock_ns))

    def command_callback(self, msg, info) -> None:
        now = time.monotonic()
        with self.lock:
            self.commands.append((now, self.clock_ns, self.running_episode))
            self.command_sent_ns.append(int(info["source_timestamp"]))

    def sim_diagnostics_callback(self, msg) -> None:
        now = time.monotonic()
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "periods_without_command" in values:
                with self.lock:
                    self.sim_diagnostics.append((now, values))
                    self._note_gc("sim_node", values)

    def _note_gc(self, node: str, values: dict[str, str]) -> None:
        if "gc_pauses" in values and "gc_max_ms" in values:
            self.node_gc[node] = {k: values[k] for k in ("gc_pauses", "gc_max_ms", "gc_full", "gc_full_max_ms")
                                  if k in values}

    def node_gc_pauses(self) -> dict[str, dict[str, float]]:
        """Each node's garbage collections since it settled, from its newest diagnostics."""
        out = {}
        with self.lock:
            for node, v in self.node_gc.items():
                try:
                    out[node] = {"pauses": int(v["gc_pauses"]), "max_ms": float(v["gc_max_ms"]),
                                 "full": int(v.get("gc_full", "0")), "full_max_ms": float(v.get("gc_full_max_ms", "0"))}
                except ValueError:
                    continue
        return out

    def episode_callback(self, msg, info_) -> None:
        try:
            info = self.conv.episode_from_msg(msg)
        except self.conv.ConversionError:
            return
        with self.lock:
            self.running_episode = info.episode if info.state == "running" else None
            if info.state != "running":
                self.episode_end_sent_ns.append(int(info_["source_timestamp"]))

    def image_callback(self, camera: str, raw: bytes) -> None:
        now = time.monotonic()
        stamp = self.conv.header_stamp_ns(raw)
        with self.lock:
            self.pairs.setdefault(_key(stamp), {})[camera] = now

    def chunk_callback(self, raw: bytes) -> None:
        now = time.monotonic()
        stamp = self.conv.header_stamp_ns(raw)
        with self.lock:
            self.chunks.setdefault(_key(stamp), now)

    def diagnostics_callback(self, msg) -> None:
        now = time.monotonic()
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            with self.lock:
                self._note_gc("policy_node", values)
                if "answers_timed" in values:
                    self.policy_answers = values
            try:
                ms = float(values.get("inference_ms", "nan"))
            except ValueError:
                continue
            if np.isfinite(ms):
                with self.lock:
                    self.inference_ms.append((now, ms))


def _clock_ticks() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError, AttributeError):
        return 100.0


def _stat_cpu_s(path: str) -> float | None:
    """utime + stime (s) from a /proc/<pid>/stat or /proc/<pid>/task/<tid>/stat file."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # after "pid (comm) "
    return (int(fields[11]) + int(fields[12])) / _clock_ticks()


def _stat_major_faults(path: str) -> int | None:
    """Major page faults so far (pages read back from disk: paged out or never loaded) from a
    /proc/<pid>/stat file (field 12)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[9])


def _stat_minor_faults(path: str) -> int | None:
    """Minor page faults so far (a page mapped without a read from disk) from a /proc/<pid>/stat
    file (field 10)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    return int(text[text.rindex(")") + 2:].split()[7])


def locked_memory_mb(pids: dict[str, int]) -> dict[str, float | None]:
    """Per named process, the memory it has locked in RAM now, MB: its resident locked pages
    (`Locked:` of /proc/<pid>/smaps_rollup). VmLck of /proc/<pid>/status would count whole
    locked mappings, pages never touched included, which with MCL_ONFAULT are not in RAM."""
    out = {}
    for name, pid in pids.items():
        out[name] = None
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Locked:"):
                    out[name] = round(int(line.split()[1]) / 1024, 1)
        except (OSError, ValueError, IndexError):
            pass
    return out


def major_faults(before: dict, after: dict) -> dict[str, int]:
    """Per named process, its major page faults between two cpu_snapshot()s."""
    return {name: after["major_faults"][name] - before["major_faults"][name] for name in after["major_faults"]
            if after["major_faults"].get(name) is not None and before["major_faults"].get(name) is not None}


def _thread_names(pid: int) -> dict[str, str]:
    names = {}
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                comm = (task / "comm").read_text().strip()
                names[task.name] = "main" if task.name == str(pid) else comm
            except OSError:
                continue
    except OSError:
        pass
    return names


def _stat_scheduling(path: str) -> tuple[int, int] | None:
    """(rt_priority, policy) from a /proc/<pid>/task/<tid>/stat file (fields 40 and 41)."""
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[37]), int(fields[38])


def sched_fifo_threads(pids: dict[str, int]) -> dict[str, dict[str, int]]:
    """Per named process, its threads on SCHED_FIFO now: {"name[tid]": priority}."""
    out = {}
    for name, pid in pids.items():
        rows = {}
        for tid, comm in _thread_names(pid).items():
            sched = _stat_scheduling(f"/proc/{pid}/task/{tid}/stat")
            if sched is not None and sched[1] == os.SCHED_FIFO:
                rows[f"{comm}[{tid}]"] = sched[0]
        out[name] = rows
    return out


def cpu_snapshot(pids: dict[str, int]) -> dict[str, Any]:
    """CPU seconds so far of each named process and of each of its threads (by thread name),
    and each process's major page faults so far."""
    procs, threads, faults = {}, {}, {}
    for name, pid in pids.items():
        procs[name] = _stat_cpu_s(f"/proc/{pid}/stat")
        faults[name] = _stat_major_faults(f"/proc/{pid}/stat")
        per = {}
        for tid, comm in _thread_names(pid).items():
            cpu = _stat_cpu_s(f"/proc/{pid}/task/{tid}/stat")
            if cpu is not None:
                per[f"{comm}[{tid}]"] = cpu
        threads[name] = per
    return {"procs": procs, "threads": threads, "major_faults": faults}


def cpu_per_sim_second(before: dict, after: dict, sim_seconds: float | None) -> tuple[dict, dict]:
    """CPU s per sim s of each process, and of each thread that used >= 1 % of a core."""
    if not sim_seconds:
        return {}, {}
    procs = {name: (after["procs"][name] - before["procs"][name]) / sim_seconds
             for name in after["procs"]
             if after["procs"].get(name) is not None and before["procs"].get(name) is not None}
    threads = {}
    for name, per in after["threads"].items():
        old = before["threads"].get(name, {})
        rows = {tid: (cpu - old.get(tid, 0.0)) / sim_seconds for tid, cpu in per.items()}
        threads[name] = {k: round(v, 4) for k, v in sorted(rows.items(), key=lambda kv: -kv[1]) if v >= 0.01}
    return {k: round(v, 4) for k, v in procs.items()}, threads


def cpu_times() -> list[int] | None:
    """The machine's CPU time counters (/proc/stat's first line, in clock ticks): user, nice,
    system, idle, iowait, irq, softirq, steal, ..."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def steal_fraction(before: list[int] | None, after: list[int] | None) -> float | None:
    """The share of the machine's CPU time the hypervisor gave to other guests between the two
    readings (steal over all time): a virtual machine's cores are not all ours when it is
    high, and the loop's deadlines suffer for reasons outside the project."""
    if not before or not after or len(before) < 8 or len(after) < 8:
        return None
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8])
    return round(delta[7] / total, 4) if total > 0 else None


def _missed(periods_ms: np.ndarray, nominal_ms: float) -> int:
    late = periods_ms[periods_ms > 1.5 * nominal_ms]
    return int(sum(max(1, int(round(p / nominal_ms)) - 1) for p in late))


def _pct(values, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def _sent_sim_ns(commands_sent: list[int], clock_sent: list[tuple[int, int]]) -> list[int]:
    """Per command, the sim time of the newest /clock published before it (by the DDS
    source timestamps of both; -1 before the first)."""
    clocks = sorted(clock_sent)
    sources = [c[0] for c in clocks]
    out = []
    for sent in commands_sent:
        i = bisect.bisect_right(sources, sent)
        out.append(clocks[i - 1][1] if i else -1)
    return out


def _at_sim(samples: list[tuple[float, dict[str, str]]], start: float, end: float) -> dict[str, Any]:
    """sim_node's own count of command delivery (its sim/diagnostics, once per wall second)
    between its first sample at or after start and its last at or before end."""
    inside = [(w, v) for w, v in samples if start <= w <= end]
    keys = ("missed_ticks_at_sim", "extra_commands_at_sim", "control_periods_at_sim", "at_sim_seconds")
    if len(inside) < 2:
        return dict.fromkeys(keys)
    (_, a), (_, b) = inside[0], inside[-1]
    try:
        def diff(key):
            return int(b[key]) - int(a[key])
        return dict(zip(keys, (diff("periods_without_command"), diff("extra_commands"),
                               diff("control_periods"), float(b["sim_time"]) - float(a["sim_time"])), strict=True))
    except (KeyError, ValueError):
        return dict.fromkeys(keys)


def _obs_to_command(cameras, commands, pairs, chunks, ends, clock_sent, start: float, end: float
                    ) -> tuple[list[float], int, int, int]:
    """Camera pair -> the first command that could use its chunk (ms), over the pairs complete
    between start and end. -> (latencies, complete pairs, inferred pairs, pairs whose episode
    ended before a command could use them)."""
    command_walls = [c[0] for c in commands]
    # The sim times the episodes ended at (the newest /clock sim_node published before each
    # "ended" message): a pair whose episode ended before a command could use its chunk has
    # no "first command from it"; the next command is the next episode's, a hold later.
    end_sims = sorted(t for t in _sent_sim_ns(ends, clock_sent) if t >= 0) if clock_sent else []
    latencies = []
    complete = inferred = after_end = 0
    for key, cams in pairs.items():
        if len(cams) < len(cameras):
            continue
        ready = max(cams.values())
        if not start <= ready <= end:
            continue
        complete += 1
        if key not in chunks:
            continue
        inferred += 1
        i = bisect.bisect_right(command_walls, chunks[key])
        if i < len(command_walls):
            pair_ns = key * 100_000  # _key's 0.1 ms units
            if bisect.bisect_left(end_sims, pair_ns) < bisect.bisect_left(end_sims, commands[i][1]):
                after_end += 1
                continue
            latencies.append((command_walls[i] - ready) * 1e3)
    return latencies, complete, inferred, after_end


def analyse(probe: _Probe, start: float, end: float, control_rate: int = CONTROL_RATE,
            steal: Sequence[tuple[float, float]] = (),
            counters: Sequence[tuple[float, dict[str, float | None]]] = ()) -> dict[str, Any]:
    """The figures from what the probe recorded between wall times start and end. steal:
    (wall s, the machine's stolen CPU ms so far) read every STEAL_SAMPLE_S (steal_near_late);
    counters: other readings taken with it (counters_near_late -> late_period_counters)."""
    nominal = 1e3 / control_rate
    with probe.lock:
        commands = list(probe.commands)
        commands_sent = list(getattr(probe, "command_sent_ns", []))
        clock_sent = list(getattr(probe, "clock_sent", []))
        sim_diagnostics = list(getattr(probe, "sim_diagnostics", []))
        ends = sorted(getattr(probe, "episode_end_sent_ns", []))
        pairs = {k: dict(v) for k, v in probe.pairs.items()}
        chunks = dict(probe.chunks)
        clock = list(probe.clock_samples)
        inference = [ms for t, ms in probe.inference_ms if start <= t <= end]
    wall, sim = [], []
    for (w0, s0, e0), (w1, s1, e1) in itertools.pairwise(commands):
        if w0 >= start and w1 <= end and e0 is not None and e0 == e1:
            wall.append((w1 - w0) * 1e3)
            sim.append((s1 - s0) / 1e6)
    wall_arr, sim_arr = np.asarray(wall), np.asarray(sim)
    # sent: the sim-time label of each period by the /clock sim_node published before each
    # command. wall_sent: the same periods by the commands' DDS source timestamps (policy_node's
    # write times): a late period there was late leaving policy_node; one late only at receipt
    # was late in delivery or in the probe's own executor.
    sent, wall_sent, late, received_first = [], [], [], 0
    spans, late_spans = [], []  # (w0, w1) wall s of every period and of the late ones
    if commands_sent and len(commands_sent) == len(commands):
        # The control tick each command was sent in (1 us of slack for stamps rounded from
        # float seconds): the tick it answers, or a later one if it left past the next tick.
        labels = [(ns + 1000) * control_rate // 1_000_000_000 for ns in _sent_sim_ns(commands_sent, clock_sent)]
        for i, ((w0, s0, e0), (w1, s1, e1)) in enumerate(itertools.pairwise(commands)):
            if not (w0 >= start and w1 <= end and e0 is not None and e0 == e1):
                continue
            received_first += (s1 + 1000) * control_rate // 1_000_000_000 < labels[i + 1]
            # Not a period whose second command was sent after sim_node ended the episode (the
            # probe takes the "ended" message later, on its own reader): see the docstring.
            ended = bisect.bisect_right(ends, commands_sent[i + 1]) > bisect.bisect_right(ends, commands_sent[i])
            if not ended:
                sent.append((labels[i + 1] - labels[i]) * nominal)
            sent_ms, received_ms = (commands_sent[i + 1] - commands_sent[i]) / 1e6, (w1 - w0) * 1e3
            wall_sent.append(sent_ms)
            spans.append((w1 - received_ms / 1e3, w1))
            if received_ms > 1.5 * nominal or sent_ms > 1.5 * nominal:
                # The period as it was late: from the earlier of its two starts (sent, received).
                late_spans.append((w1 - max(received_ms, sent_ms) / 1e3, w1))
                late.append({"at_s": round(w1 - start, 3), "received_ms": round(received_ms, 2),
                             "sent_ms": round(sent_ms, 2), "sim_ms": round((s1 - s0) / 1e6, 2)})
    wall_sent_arr = np.asarray(wall_sent)
    sent_arr = np.asarray(sent)
    latencies, complete, inferred, after_end = _obs_to_command(probe.cameras, commands, pairs, chunks, ends,
                                                                clock_sent, start, end)
    window = [(w, s) for w, s in clock if start <= w <= end]
    rtf = sim_seconds = None
    if len(window) >= 2 and window[-1][0] > window[0][0]:
        sim_seconds = (window[-1][1] - window[0][1]) / 1e9
        rtf = sim_seconds / (window[-1][0] - window[0][0])
    return {
        "control_period_p50_ms": _pct(sim_arr, 50), "control_period_p99_ms": _pct(sim_arr, 99),
        "missed_ticks": _missed(sim_arr, nominal),
        "control_period_wall_p50_ms": _pct(wall_arr, 50),
        "control_period_wall_p99_ms": _pct(wall_arr, 99),
        "missed_ticks_wall": _missed(wall_arr, nominal),
        "control_period_sim_p50_ms": _pct(sim_arr, 50),
        "control_period_sim_p99_ms": _pct(sim_arr, 99),
        "missed_ticks_sim": _missed(sim_arr, nominal),
        "control_periods": len(wall),
        "control_period_wall_sent_p99_ms": _pct(wall_sent_arr, 99),
        "missed_ticks_wall_sent": _missed(wall_sent_arr, nominal) if len(wall_sent) else None,
        "late_periods": late[:50],
        "control_period_sim_sent_p50_ms": _pct(sent_arr, 50),
        "control_period_sim_sent_p99_ms": _pct(sent_arr, 99),
        "missed_ticks_sim_sent": _missed(sent_arr, nominal) if len(sent) else None,
        "commands_received_before_their_clock": received_first if len(sent) else None,
        **_at_sim(sim_diagnostics, start, end),
        "obs_to_command_ms_p50": _pct(latencies, 50), "obs_to_command_ms_p99": _pct(latencies, 99),
        "obs_to_command_pairs": len(latencies), "obs_to_command_pairs_after_episode_end": after_end,
        "camera_pairs": complete, "camera_pairs_inferred": inferred,
        "ros_seconds": end - start, "ros_rtf": rtf, "ros_sim_seconds": sim_seconds,
        "ros_node_inference_ms_p50": _pct(inference, 50),
        **steal_near_late(steal, spans, late_spans),
        "late_period_counters": counters_near_late(counters, spans, late_spans) if counters else None,
    }


STEAL_SAMPLE_S = 0.05  # how often run_over_dds reads the machine's steal counter


def stolen_ms(times: list[int] | None) -> float | None:
    """/proc/stat's steal column in ms (cpu_times' readings are in clock ticks)."""
    if not times or len(times) < 8:
        return None
    return times[7] * 1e3 / os.sysconf("SC_CLK_TCK")


def _near(times: np.ndarray, counts: np.ndarray, rows) -> tuple[int, int, float | None]:
    """For spans (w0, w1) of wall s: how many had the counter move (its readings from the last
    one before w0 to the first one after w1), of how many inside the sampled window, and the
    mean it moved."""
    amounts = []
    for w0, w1 in rows:
        i = int(np.searchsorted(times, w0, side="right")) - 1
        j = int(np.searchsorted(times, w1, side="left"))
        if 0 <= i and j < len(times):
            amounts.append(float(counts[j] - counts[i]))
    return sum(a > 0 for a in amounts), len(amounts), round(float(np.mean(amounts)), 2) if amounts else None


def steal_near_late(steal: Sequence[tuple[float, float]], spans: Sequence[tuple[float, float]],
                    late_spans: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Whether the late periods are the host's doing: of the late periods, how many had CPU
    time stolen by the hypervisor during them (the steal counter's readings around a period:
    the last one before it starts to the first one after it ends), against the same share of
    every period. A host that takes cores in bursts shows as a late share far above the
    share of all periods; late periods with no steal around them are the project's own.
    steal_ms_mean_late_period / steal_ms_mean_period: the mean stolen around each (the
    counter moves in clock ticks, 10 ms, summed over the cores).
    steal_ms_max_per_sample: the most stolen in one sampling interval (both cores)."""
    if len(steal) < 2:
        return {}
    times = np.asarray([t for t, _ in steal])
    counts = np.asarray([ms for _, ms in steal])
    late_hit, late_n, late_mean = _near(times, counts, late_spans)
    all_hit, all_n, all_mean = _near(times, counts, spans)
    return {"late_periods_with_steal": late_hit, "late_periods_sampled": late_n,
            "periods_with_steal_share": round(all_hit / all_n, 4) if all_n else None,
            "steal_ms_mean_late_period": late_mean, "steal_ms_mean_period": all_mean,
            "steal_ms_max_per_sample": round(float(np.max(np.diff(counts))), 1)}


def counters_near_late(samples: Sequence[tuple[float, dict[str, float | None]]], spans: Sequence[tuple[float, float]],
                       late_spans: Sequence[tuple[float, float]]) -> dict[str, dict[str, Any]]:
    """As steal_near_late for other counters read at the same times (samples: (wall s,
    {name: value so far})): per counter, of the late periods how many saw it move
    (`late_with`, of `late_sampled`), the share of all periods that did (`all_share`), and
    the mean it moved around a late period and around any (`mean_late`, `mean_all`). A
    counter that moves around most late periods and few others points at the cause."""
    out = {}
    names = sorted({n for _, values in samples for n in values})
    for name in names:
        rows = [(t, v[name]) for t, v in samples if v.get(name) is not None]
        if len(rows) < 2:
            continue
        times = np.asarray([t for t, _ in rows])
        counts = np.asarray([c for _, c in rows])
        late_hit, late_n, late_mean = _near(times, counts, late_spans)
        all_hit, all_n, all_mean = _near(times, counts, spans)
        out[name] = {"late_with": late_hit, "late_sampled": late_n,
                     "all_share": round(all_hit / all_n, 4) if all_n else None,
                     "mean_late": late_mean, "mean_all": all_mean}
    return out


def _kernel_thread_pids(prefix: str = "kdamond") -> list[int]:
    """The pids of the kernel threads whose name starts with prefix (DAMON's kdamond.N)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().startswith(prefix):
                    out.append(int(entry))
            except OSError:
                pass
    return out


def late_counters_sample(pids: dict[str, int], kernel_pids: Sequence[int]) -> dict[str, float | None]:
    """One reading for counters_near_late: each named process's minor page faults so far
    (`minor_faults:NAME`) and the CPU ms of the given kernel threads (`kdamond_ms`)."""
    values: dict[str, float | None] = {}
    for name, pid in pids.items():
        values[f"minor_faults:{name}"] = _stat_minor_faults(f"/proc/{pid}/stat")
    if kernel_pids:
        cpu = [_stat_cpu_s(f"/proc/{pid}/stat") for pid in kernel_pids]
        values["kdamond_ms"] = sum(c for c in cpu if c is not None) * 1e3
    return values


SIM_LOOP_KEYS = ("loop_late_max_ms", "loop_late_over_10ms", "step_max_ms", "render_max_ms")
# Keys of newer sim_nodes (arm_act.nodes.loop_timing), recorded where present.
SIM_LOOP_EXTRA_KEYS = ("loop_late_events", "loop_wake_late_max_ms", "step_cpu_max_ms", "render_cpu_max_ms",
                       "start_render_max_ms", "loop_overruns", "loop_skipped_ms")


def sim_loop_timing(probe) -> dict | None:
    """sim_node's own loop timing from its newest diagnostics (since its first episode): how
    late it reached a publication time at worst, how often over 10 ms and over 5 ms
    (loop_late_events), how late a wait woke up at worst, its longest physics step and render
    of both cameras (wall and thread-CPU ms), its longest episode-start render, and its latest
    publications over 5 and over 10 ms late with what the loop did before them (`late`,
    `late_over_10ms`; arm_act.nodes.loop_timing)."""
    with probe.lock:
        newest = probe.sim_diagnostics[-1][1] if probe.sim_diagnostics else {}
    try:
        if not all(k in newest for k in SIM_LOOP_KEYS):
            return None
        timing: dict = {k: float(newest[k]) for k in (*SIM_LOOP_KEYS, *SIM_LOOP_EXTRA_KEYS) if k in newest}
        for key, name in (("loop_late_latest", "late"), ("loop_late_over_10ms_latest", "late_over_10ms")):
            if key in newest:
                timing[name] = json.loads(newest[key])
        return timing
    except ValueError:  # json.JSONDecodeError included
        return None


def policy_answer_timing(probe) -> dict | None:
    """policy_node's answers to the control ticks from its newest diagnostics
    (arm_act.nodes.loop_timing.AnswerTiming): how many, how many late (the command over 1.5
    periods after the one before, or its own work over 5 ms), its longest work and longest wait
    for a tick's joint state after its /clock, and the latest late answers (`late`), each set
    beside sim_node's write of the tick's /clock (its DDS source timestamp, as the probe
    received it): `clock_to_callback_ms`, from that write to policy_node's /clock callback
    (DDS and the executor's queue), and `monotonic_s`, the command's write on the monotonic clock."""
    with probe.lock:
        values = dict(getattr(probe, "policy_answers", {}))
        clock_written = {sim: source for source, sim in getattr(probe, "clock_sent", [])}
    if not values:
        return None
    try:
        out: dict = {k: (int(v) if k.startswith("answers_") else float(v)) for k, v in values.items()
                     if k.startswith(("answers_timed", "answers_late", "answer_")) and k != "answers_late_latest"}
        offset_ns = time.time_ns() - time.monotonic_ns()
        late = json.loads(values.get("answers_late_latest", "[]"))
        for event in late:
            written = clock_written.get(event["stamp_ns"])
            event["clock_to_callback_ms"] = (round((event["clock_in_ns"] - written) / 1e6, 2)
                                             if written is not None and event.get("clock_in_ns") else None)
            event["monotonic_s"] = round((event["written_ns"] - offset_ns) / 1e9, 4)
        out["late"] = late
        return out
    except (ValueError, TypeError, KeyError):
        return None


class _InProcess:
    """sim_node + policy_node composed in this process (one SingleThreadedExecutor on their
    own context), the arrangement the demo does NOT use: to measure it (docs/architecture.md, "Threading")."""

    def __init__(self, domain: int):
        import rclpy

        self.context = rclpy.Context()
        rclpy.init(context=self.context, domain_id=domain)
        self.nodes, self.executor, self.thread = [], None, None

    def start(self, sim_params: dict, policy_params: dict) -> None:
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.parameter import Parameter

        from arm_act.nodes.policy_node import PolicyNode
        from arm_act.nodes.sim_node import SimNode

        def overrides(values):
            return [Parameter(k, value=v) for k, v in values.items()]

        self.nodes = [PolicyNode(context=self.context, parameter_overrides=overrides(policy_params)),
                      SimNode(context=self.context, parameter_overrides=overrides(sim_params))]
        self.executor = SingleThreadedExecutor(context=self.context)
        for node in self.nodes:
            self.executor.add_node(node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def check(self) -> None:
        if any(getattr(node, "failed", False) for node in self.nodes):
            raise RuntimeError("sim_node failed")

    def tail(self, name: str, lines: int = 5) -> str:
        return "(in process: see the log above)"

    def pids(self) -> dict[str, int]:
        return {"nodes_and_probe": os.getpid()}

    def stop(self) -> None:
        import rclpy

        for node in self.nodes:
            node.destroy_node()
        if self.executor is not None:
            self.executor.shutdown(timeout_sec=2.0)
        if self.context.ok():
            rclpy.shutdown(context=self.context)


def _yaml_defaults(sim_yaml: Path, policy_yaml: Path, camera_rate: int | None,
                   thread_priority: int | None) -> tuple[int, int]:
    """The camera rate and thread priority to run with: given, else the parameter files'."""
    import yaml

    from arm_act.common import realtime

    if camera_rate is None:
        camera_rate = int(yaml.safe_load(sim_yaml.read_text())["/**"]["ros__parameters"]["camera_rate"])
    if thread_priority is None:
        thread_priority = int(yaml.safe_load(policy_yaml.read_text())["/**"]["ros__parameters"].get(
            "thread_priority", realtime.DEFAULT_THREAD_PRIORITY))
    reason = realtime.check_priority(thread_priority)
    if reason:
        raise ValueError(reason)
    return camera_rate, thread_priority


def _wait_for_first_command(probe, children) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while not probe.commands:
        children.check()
        if time.monotonic() > deadline:
            raise RuntimeError(f"no command from policy_node within {STARTUP_TIMEOUT_S:.0f} s: "
                               f"policy_node: {children.tail('policy_node')}; "
                               f"sim_node: {children.tail('sim_node')}")
        time.sleep(0.05)


def _sample_window(children, pids: dict[str, int], start: float, end: float):
    """Until wall time `end`: the processes' CPU and scheduling at `start` and at the end, and
    every STEAL_SAMPLE_S the machine's steal and the late-period counters.
    -> (cpu_before, cpu_after, times_before, times_after, sched, steal, counters)."""
    cpu_before = sched = times_before = None
    steal: list[tuple[float, float]] = []  # (wall s, stolen ms): steal_near_late
    counters: list[tuple[float, dict]] = []  # (wall s, readings): counters_near_late
    kernel_pids = _kernel_thread_pids()
    while time.monotonic() < end:
        children.check()
        now = time.monotonic()
        if cpu_before is None and now >= start:
            cpu_before, times_before = cpu_snapshot(pids), cpu_times()
            sched = sched_fifo_threads(pids)
        if now >= start - STEAL_SAMPLE_S:
            if (ms := stolen_ms(cpu_times())) is not None:
                steal.append((now, ms))
            counters.append((now, late_counters_sample(pids, kernel_pids)))
        time.sleep(STEAL_SAMPLE_S)
    cpu_after, times_after = cpu_snapshot(pids), cpu_times()
    if (ms := stolen_ms(times_after)) is not None:
        steal.append((time.monotonic(), ms))
    counters.append((time.monotonic(), late_counters_sample(pids, kernel_pids)))
    return cpu_before, cpu_after, times_before, times_after, sched, steal, counters


def _add_process_figures(result: dict, probe, pids: dict[str, int], start: float, end: float,
                         gc_pauses: list[tuple[float, float]], window) -> None:
    """What the processes did in the window, beside the probe's figures: steal, the probe's
    own collections, CPU per sim second, faults, scheduling, locked memory, the nodes' own
    timing records."""
    cpu_before, cpu_after, times_before, times_after, sched, _, _ = window
    result["window_start_monotonic_s"] = round(start, 6)  # late_periods' at_s count from here
    inside = [ms for t, ms in gc_pauses if start <= t <= end]
    result["steal_fraction"] = steal_fraction(times_before, times_after)
    result["probe_gc_pauses"] = len(inside)
    result["probe_gc_max_ms"] = round(max(inside), 3) if inside else 0.0
    result["ros_cpu_s_per_sim_s"], result["ros_cpu_threads_s_per_sim_s"] = cpu_per_sim_second(
        cpu_before or cpu_after, cpu_after, result["ros_sim_seconds"])
    result["ros_major_faults"] = major_faults(cpu_before or cpu_after, cpu_after)
    result["ros_sched_fifo_threads"] = sched if sched is not None else sched_fifo_threads(pids)
    result["ros_locked_memory_mb"] = locked_memory_mb(pids)
    result["ros_node_gc"] = probe.node_gc_pauses()
    result["ros_sim_loop"] = sim_loop_timing(probe)
    result["ros_policy_answers"] = policy_answer_timing(probe)


def measure_control_over_dds(checkpoint: Path, *, backend: str, threads: int, seconds: float,
                             logs: Path, domain_id: int | None = None,
                             camera_rate: int | None = None, arrangement: str = "processes",
                             thread_priority: int | None = None, lock_memory: bool | None = None,
                             policy_overrides: dict | None = None) -> dict[str, Any]:
    """Run sim_node + policy_node for `seconds` of wall time after warm-up; see the module
    docstring for what is measured. camera_rate: default sim.yaml's. thread_priority: the
    nodes' and the probe's SCHED_FIFO priority (default policy.yaml's; 0: the normal
    scheduler). lock_memory: both nodes' lock_memory parameter (default the yaml files').
    policy_overrides: more policy_node parameters (e.g. inference_thread_priority).
    arrangement:
    "processes" (as `arm-act demo` and launch run them) or "single" (both nodes in this
    process, sharing its GIL with each other and the probe)."""
    if arrangement not in ("processes", "single"):
        raise ValueError(f"arrangement={arrangement!r} must be 'processes' or 'single'")
    from arm_act.common import realtime
    from arm_act.common.paths import config_file
    from arm_act.common.processes import NodeProcesses, ros_args
    from arm_act.policy.checkpoint import read_config
    from arm_act.ros.private_domain import PrivateDomain

    cameras = tuple(read_config(checkpoint).cameras)
    sim_yaml, policy_yaml = config_file("sim.yaml"), config_file("policy.yaml")
    camera_rate, thread_priority = _yaml_defaults(sim_yaml, policy_yaml, camera_rate, thread_priority)
    tuning = not realtime.tuning_disabled()
    probe_scheduling: list = []

    def spin_probe() -> None:
        realtime.name_os_thread("bench_probe")
        if tuning and thread_priority:  # the same priority as the nodes' deadline threads
            probe_scheduling.append(realtime.set_thread_priority(thread_priority))
            if probe_scheduling[0].fifo:
                realtime.set_reception_threads_priority(thread_priority)
        executor.spin()
    gc_pauses: list[tuple[float, float]] = []  # (wall s, ms) of this process's collections
    gc_started = [0.0]

    def on_gc(phase: str, info_: dict) -> None:
        if phase == "start":
            gc_started[0] = time.monotonic()
        else:
            gc_pauses.append((gc_started[0], (time.monotonic() - gc_started[0]) * 1e3))
    domain = domain_id if domain_id is not None else 170 + os.getpid() % 50
    with PrivateDomain(domain, spin_join_timeout_s=2.0) as dds:
        env, executor = dds.env, dds.executor
        children = dds.children = NodeProcesses(logs)
        switch_interval = None
        try:
            probe = _Probe(dds.context, cameras)
            dds.spin(probe.node, target=spin_probe, name="bench_probe")
            common = {"use_sim_time": True, "mode": "realtime", "control_rate": CONTROL_RATE,
                      "thread_priority": thread_priority}
            if lock_memory is not None:
                common["lock_memory"] = lock_memory
            policy_params = {**common, "checkpoint": str(checkpoint), "backend": backend, "torch_threads": threads,
                             "publish_attention": False, **(policy_overrides or {})}
            sim_params = {**common, "real_time_factor": 1.0, "seed": 0, "blocks": "3-3", "episodes": 0,
                          "camera_rate": camera_rate, "episode_time_limit": float(seconds + 60.0)}
            if arrangement == "single":
                children = dds.children = _InProcess(domain)
                children.start(sim_params, policy_params)
            else:
                children.start("policy_node", "arm_act.nodes.policy_node",
                               ros_args(policy_params, policy_yaml), env)
                children.start("sim_node", "arm_act.nodes.sim_node", ros_args(sim_params, sim_yaml), env)
            _wait_for_first_command(probe, children)
            start = probe.commands[0][0] + WARMUP_S
            end = start + seconds
            # The probe's own stalls would read as late commands: this process holds torch and the
            # policy, and a full garbage collection of its heap takes 80-250 ms here; the nodes'
            # processes get the same treatment (arm_act/common/realtime.py).
            gc.collect()
            gc.freeze()
            gc.callbacks.append(on_gc)
            switch_interval = sys.getswitchinterval()
            sys.setswitchinterval(0.0005)
            pids = (children.pids() if arrangement == "single"
                    else {name: proc.pid for name, proc in children.procs})
            if arrangement != "single":
                pids["probe"] = os.getpid()
            window = _sample_window(children, pids, start, end)
            *_, steal, counters = window
            gc.callbacks.remove(on_gc)
            result = analyse(probe, start, end, steal=steal, counters=counters)
            _add_process_figures(result, probe, pids, start, end, gc_pauses, window)
            if probe_scheduling and not probe_scheduling[0].fifo:
                result["ros_probe_scheduling"] = probe_scheduling[0].describe("probe thread")
        finally:
            if on_gc in gc.callbacks:
                gc.callbacks.remove(on_gc)
            if switch_interval is not None:
                sys.setswitchinterval(switch_interval)
                gc.unfreeze()
    return {**result, "ros_camera_rate_hz": camera_rate, "ros_backend": backend, "ros_arrangement": arrangement,
            "ros_thread_priority": thread_priority, "ros_realtime_tuning": tuning, "ros_lock_memory": lock_memory}
