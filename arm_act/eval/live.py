"""`arm-act eval --live`: the seeded episodes run by the live nodes in real time.

sim_node (realtime, real_time_factor 1) and policy_node (or expert_node) run as child
processes, started the way `ros2 launch` and `arm-act demo` start them, in a private DDS
domain restricted to localhost. Episode i uses seed S+i, as in process and over ROS in
lockstep, so the same seeds are the same scenes; only the timing is real. A probe node in
this process only listens (no images, so it costs the nodes next to nothing):

- `episode`: each episode's start (sim time), seed, outcome and duration;
- the arm commands, stamped with the newest `/clock` the probe has seen: the commands of an
  episode, the sim ticks and wall periods between them (missed ticks: a gap over 1.5
  control periods counts round(gap / period) - 1), and how long after the episode's start
  the first command came;
- `policy/action_chunk` (stamped with its camera pair): each chunk's age in sim time when it
  arrived, and from it the latency in control ticks the chunk really had (the first tick
  whose command can use it, counted from the pair's tick: in process this is
  `latency_ticks`, 1 for the shipped evaluation); camera pairs that got no chunk;
- `policy/diagnostics`: inference time, and the node's cumulative counters, differenced over
  the episode (ticks held on stale observations, camera pairs paired with a joint state of
  another tick, deadline misses).

`compare_in_process` then runs the same seeds in process (arm_act.eval.in_process) and
`compare` puts both side by side: rates with 95% Wilson intervals and the seeds that differ
in each direction. The machine's load average before and after goes with the result: real
time on a loaded machine is not real time on a quiet one.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from arm_act.eval.config import EvalConfig

STARTUP_TIMEOUT_S = 180.0  # two processes importing torch and PyBullet on a loaded machine
# Counters of policy/diagnostics that are differenced per episode.
DIAG_COUNTERS = ("missed_ticks", "deadline_misses", "stale_ticks", "pairs_joint_mismatch", "inference_failures",
                 "stale_chunks_dropped", "chunks_timed", "chunk_latency_ticks", "late_chunks")


class _Episode:
    def __init__(self, info):
        self.info = info
        self.commands: list[tuple[float, int]] = []  # (wall s, sim ns)
        self.chunks: list[tuple[int, int]] = []  # (pair stamp ns, sim ns at receipt)
        self.inference_ms: list[float] = []
        self.diag_start: dict[str, float] | None = None


class _Probe:
    """Listens to the live nodes; every callback only records."""

    def __init__(self, context, on_finished, real_time_factor: float = 1.0):
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.node import Node
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import Float64MultiArray, String
        from trajectory_msgs.msg import JointTrajectory

        from arm_act.ros import conversions as conv
        from arm_act.ros.qos import TRANSIENT_LOCAL

        self.conv = conv
        self.node = Node("live_eval_probe", context=context)
        self.lock = threading.Lock()
        self.clock_ns = -1
        self.current: _Episode | None = None
        self.finished: list[dict] = []
        self.seen: set[int] = set()
        self.diag: dict[str, float] = {}
        self.on_finished = on_finished
        self.real_time_factor = real_time_factor
        sub = self.node.create_subscription
        self.clock_sub = sub(Clock, "/clock", self.clock_callback, 10)
        sub(Float64MultiArray, conv.ARM_COMMAND_TOPIC, self.command_callback, 10)
        self.episode_sub = sub(String, "episode", self.episode_callback, TRANSIENT_LOCAL)
        sub(JointTrajectory, "policy/action_chunk", self.chunk_callback, 10, raw=True)  # stamps only
        sub(DiagnosticArray, "policy/diagnostics", self.diagnostics_callback, 10)

    def clock_callback(self, msg) -> None:
        with self.lock:
            self.clock_ns = self.conv.stamp_to_ns(msg.clock)

    def command_callback(self, msg) -> None:
        now = time.monotonic()
        with self.lock:
            if self.current is not None:
                self.current.commands.append((now, self.clock_ns))

    def chunk_callback(self, raw: bytes) -> None:
        stamp = self.conv.header_stamp_ns(raw)
        with self.lock:
            if self.current is not None:
                self.current.chunks.append((stamp, self.clock_ns))

    def diagnostics_callback(self, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            with self.lock:
                for key in DIAG_COUNTERS:
                    try:
                        self.diag[key] = float(values[key])
                    except (KeyError, ValueError):
                        pass
                try:
                    ms = float(values.get("inference_ms", "nan"))
                except ValueError:
                    ms = float("nan")
                if self.current is not None and np.isfinite(ms):
                    self.current.inference_ms.append(ms)

    def episode_callback(self, msg) -> None:
        try:
            info = self.conv.episode_from_msg(msg)
        except self.conv.ConversionError:
            return
        record = None
        with self.lock:
            if info.state == "running":
                if info.episode not in self.seen:
                    self.seen.add(info.episode)
                    self.current = _Episode(info)
                    self.current.diag_start = dict(self.diag)
            elif self.current is not None and self.current.info.episode == info.episode:
                episode, self.current = self.current, None
                record = episode_record(episode, info, dict(self.diag), self.real_time_factor)
                # A second sim_node in the domain (another run's) makes the episode meaningless.
                record["realtime"]["clock_publishers"] = self.node.count_publishers("/clock")
                self.finished.append(record)
        if record is not None:
            self.on_finished(record)


def _missed(periods_ms: np.ndarray, nominal_ms: float) -> int:
    late = periods_ms[periods_ms > 1.5 * nominal_ms]
    return int(sum(max(1, int(round(p / nominal_ms)) - 1) for p in late))


def episode_record(episode: _Episode, final, diag_end: dict[str, float], real_time_factor: float = 1.0) -> dict:
    """One live episode's record: what the in-process runners record, plus `realtime`
    (wall periods are judged against the control period stretched by 1 / real_time_factor)."""
    start = episode.info
    period_ns = 1e9 / start.control_rate
    nominal_ms = period_ns / 1e6
    sims = np.asarray([s for _, s in episode.commands if s >= 0], dtype=np.int64)
    walls = np.asarray([w for w, _ in episode.commands], dtype=np.float64)
    sim_periods = np.diff(sims) / 1e6 if len(sims) > 1 else np.zeros(0)
    wall_periods = np.diff(walls) * 1e3 if len(walls) > 1 else np.zeros(0)
    ages = np.asarray([(received - stamp) / 1e6 for stamp, received in episode.chunks if received >= 0])
    # The first tick at which a chunk can act: the first command computed after it arrived,
    # i.e. the next control tick after its arrival (counted from the pair's tick).
    latency = np.floor(ages / nominal_ms).astype(int) + 1 if len(ages) else np.zeros(0, dtype=int)
    camera_ticks = int(final.time * final.camera_rate) + 1
    diag_start = episode.diag_start or {}
    counters = {key: int(diag_end[key] - diag_start.get(key, 0.0)) for key in DIAG_COUNTERS if key in diag_end}
    inference = np.asarray(episode.inference_ms)
    realtime = {
        "start_s": round(start.start, 4),
        # Where the episode starts on the control-period grid of /clock (0: on it).
        "start_offset_ms": round((start.start_ns % period_ns) / 1e6, 3),
        "commands": len(episode.commands),
        "first_command_ms": None if not len(sims) else round((int(sims[0]) - start.start_ns) / 1e6, 1),
        "missed_ticks_sim": _missed(sim_periods, nominal_ms),
        "missed_ticks_wall": _missed(wall_periods, nominal_ms / real_time_factor),
        "wall_period_p99_ms": round(float(np.percentile(wall_periods, 99)), 2) if len(wall_periods) else None,
        "chunks": len(episode.chunks),
        "camera_pairs": camera_ticks,
        "pairs_without_chunk": max(0, camera_ticks - len(episode.chunks)),
        "chunk_age_ms_p50": round(float(np.median(ages)), 1) if len(ages) else None,
        "chunk_age_ms_max": round(float(ages.max()), 1) if len(ages) else None,
        # From the probe's clock (which lags when the machine is loaded: the node's own
        # counters below, chunk_latency_ticks and late_chunks, are the exact ones).
        "probe_chunk_latency_ticks": {str(k): v for k, v in sorted(Counter(latency.tolist()).items())},
        "inference_ms_p50": round(float(np.median(inference)), 2) if len(inference) else None,
        "inference_ms_max": round(float(inference.max()), 2) if len(inference) else None,
        **counters,
    }
    if counters.get("chunks_timed"):
        realtime["chunk_latency_ticks_mean"] = round(counters["chunk_latency_ticks"] / counters["chunks_timed"], 2)
    return {"seed": final.seed, "n_blocks": final.n_blocks, "instruction": final.instruction,
            "status": final.state, "success": final.state == "success", "duration": round(final.time, 4),
            "realtime": realtime}


def describe_line(index: int, total: int, record: dict) -> str:
    rt = record["realtime"]
    return (f"live {index:3d}/{total} seed {record['seed']} {record['n_blocks']} blocks "
            f"{record['status']:8s} {record['duration']:6.2f} s | missed ticks {rt['missed_ticks_sim']} sim "
            f"{rt['missed_ticks_wall']} wall, late chunks {rt.get('late_chunks')}/{rt['chunks']}, "
            f"inference p50 {rt['inference_ms_p50']} ms, start offset {rt['start_offset_ms']:g} ms, "
            f"first command +{rt['first_command_ms']} ms"
            + ("  (ANOTHER /clock PUBLISHER IN THIS DOMAIN: not a valid episode)"
               if rt.get("clock_publishers", 1) > 1 else ""))


def run_live(config: EvalConfig, logs: Path | None = None, domain_id: int | None = None,
             progress=None) -> tuple[list[dict], dict[str, Any]]:
    """The episodes of `config` through the live nodes in real time -> (records, run info).
    progress(line) gets one line per finished episode (default: stderr)."""
    from arm_act.common.paths import config_file
    from arm_act.common.processes import NodeProcesses, ros_args
    from arm_act.ros.private_domain import PrivateDomain

    if progress is None:
        def progress(line: str) -> None:
            print(line, file=sys.stderr, flush=True)

    # 50-99: below the domains the tests (100+) and `arm-act bench` (170+) pick, so a test run
    # beside a live evaluation cannot put a second /clock into it (seen: sim time jumping back).
    domain = domain_id if domain_id is not None else 50 + os.getpid() % 50
    owned_logs = None
    if logs is None:
        owned_logs = tempfile.TemporaryDirectory(prefix="arm_act_live_")
        logs = Path(owned_logs.name)
    logs.mkdir(parents=True, exist_ok=True)
    probe = None

    def finished(record: dict) -> None:
        record.update(config.goal_fields(record["instruction"]))
        progress(describe_line(len(probe.finished), config.episodes, record))

    try:
        with PrivateDomain(domain) as dds:
            env = dds.env
            children = dds.children = NodeProcesses(logs)
            load_before = os.getloadavg()
            started = time.monotonic()
            probe = _Probe(dds.context, finished, config.real_time_factor)
            dds.spin(probe.node, name="live_eval_probe")
            common = {"use_sim_time": True, "mode": "realtime", "control_rate": config.control_rate}
            settings = config.settings
            # sim_node first: it starts no episode before a controller publishes commands, so
            # the probe matches its episode and clock publishers before episode 0 can begin.
            # Started together, a slow discovery (a loaded machine) let the probe miss a short
            # first episode's start, and the run waited for an episode it would never see.
            children.start("sim_node", "arm_act.nodes.sim_node", ros_args({
                **common, "real_time_factor": config.real_time_factor, "seed": config.seed,
                "blocks": config.blocks, "episodes": config.episodes, "camera_rate": config.camera_rate,
                "episode_time_limit": config.time_limit, "exit_when_done": False, **config.node_task()},
                config_file("sim.yaml")), env)
            _wait_for_match(probe, children, STARTUP_TIMEOUT_S)
            if config.checkpoint is None:
                children.start("expert_node", "arm_act.nodes.expert_node", ros_args(common), env)
            else:
                children.start("policy_node", "arm_act.nodes.policy_node", ros_args({
                    **common, "checkpoint": str(config.checkpoint), "execution": settings.execution,
                    "ensemble_m": settings.ensemble_m, "ensemble_m_after_change": settings.ensemble_m_after_change,
                    "ensemble_after_change_s": settings.ensemble_after_change_s, "gripper": settings.gripper,
                    "torch_threads": settings.threads,
                    "backend": settings.backend, "max_joint_speed": settings.max_joint_speed,
                    "device": settings.device, "assist": settings.assist, "regrasps": settings.regrasps,
                    "regrasp_retry": settings.retry, "publish_attention": False},
                    config_file("policy.yaml")), env)
            # Before the first episode: the start-up; then no episode may take longer than its
            # time limit, the hold after it and a margin.
            seen, last_change = (0, None), time.monotonic()
            while len(probe.finished) < config.episodes:
                problem = children.failed()
                if problem:
                    raise RuntimeError(problem)
                now_seen = (len(probe.finished), None if probe.current is None else probe.current.info.episode)
                if now_seen != seen:
                    seen, last_change = now_seen, time.monotonic()
                patience = STARTUP_TIMEOUT_S if seen == (0, None) else config.time_limit * 3 + 30.0
                if time.monotonic() - last_change > patience:
                    controller = "policy_node" if config.checkpoint is not None else "expert_node"
                    raise RuntimeError(f"nothing happened for {patience:.0f} s: {controller}: "
                                       f"{children.tail(controller)}; sim_node: {children.tail('sim_node')}")
                time.sleep(0.1)
            records = list(probe.finished[:config.episodes])
    finally:
        if owned_logs is not None:
            owned_logs.cleanup()
    info = {"wall_time_s": round(time.monotonic() - started, 1),
            "load_average_before": [round(v, 2) for v in load_before],
            "load_average_after": [round(v, 2) for v in os.getloadavg()],
            "cpus": os.cpu_count(), "real_time_factor": config.real_time_factor,
            "totals": realtime_totals(records)}
    return records, info


def _wait_for_match(probe: _Probe, children, timeout: float) -> None:
    """Until the probe's episode and /clock readers have matched sim_node's writers."""
    deadline = time.monotonic() + timeout
    while not (probe.episode_sub.get_publisher_count() and probe.clock_sub.get_publisher_count()):
        problem = children.failed()
        if problem:
            raise RuntimeError(problem)
        if time.monotonic() > deadline:
            raise RuntimeError(f"sim_node's episode and /clock publishers not seen for {timeout:.0f} s: "
                               f"sim_node: {children.tail('sim_node')}")
        time.sleep(0.05)


def realtime_totals(records: list[dict]) -> dict[str, Any]:
    """The per-episode real-time diagnostics summed over the run."""
    keys = ("commands", "missed_ticks_sim", "missed_ticks_wall", "chunks", "camera_pairs", "pairs_without_chunk",
            *DIAG_COUNTERS)
    totals: dict[str, Any] = {k: sum(r["realtime"].get(k, 0) or 0 for r in records) for k in keys}
    latency: dict[str, int] = {}
    for r in records:
        for k, v in r["realtime"]["probe_chunk_latency_ticks"].items():
            latency[k] = latency.get(k, 0) + v
    totals["probe_chunk_latency_ticks"] = dict(sorted(latency.items(), key=lambda kv: int(kv[0])))
    if totals.get("chunks_timed"):
        totals["chunk_latency_ticks_mean"] = round(totals["chunk_latency_ticks"] / totals["chunks_timed"], 2)
    totals["episodes_off_control_grid"] = sum(1 for r in records if r["realtime"]["start_offset_ms"] != 0)
    totals["episodes_with_a_foreign_clock"] = [r["seed"] for r in records
                                               if r["realtime"].get("clock_publishers", 1) > 1]
    inference = [r["realtime"]["inference_ms_p50"] for r in records if r["realtime"]["inference_ms_p50"] is not None]
    totals["inference_ms_p50_median"] = round(float(np.median(inference)), 2) if inference else None
    return totals


def compare(live: list[dict], in_process: list[dict]) -> dict[str, Any]:
    """Both rates with 95% Wilson intervals on the same seeds, and the seeds that differ."""
    from arm_act.eval.stats import wilson_interval

    def rate(records):
        n, k = len(records), sum(r["success"] for r in records)
        low, high = wilson_interval(k, n)
        return {"successes": k, "episodes": n, "success_rate": k / n if n else 0.0,
                "ci95": [round(low, 4), round(high, 4)]}

    by_seed = {r["seed"]: r for r in in_process}
    both = [(r, by_seed[r["seed"]]) for r in live if r["seed"] in by_seed]
    return {
        "live": rate([a for a, _ in both]), "in_process": rate([b for _, b in both]),
        "difference_points": round(100 * (sum(a["success"] for a, _ in both) - sum(b["success"] for _, b in both))
                                   / max(1, len(both)), 2),
        "failed_live_only": [a["seed"] for a, b in both if b["success"] and not a["success"]],
        "failed_in_process_only": [a["seed"] for a, b in both if a["success"] and not b["success"]],
        "failed_both": [a["seed"] for a, b in both if not a["success"] and not b["success"]],
    }
