"""Metrics of recorded bags, read only from the bag contents (`arm-act report`).

Per bag: the episodes and their outcome (the `episode` status JSON, cross-checked against
the final `objects` markers), control-rate statistics of the command topics, image-to-
command latency, joint tracking error and command smoothness; then aggregates over bags.
Times are bag receive timestamps (sim time) unless a metric says header stamp.

Definitions:
- periods: differences of consecutive command timestamps within one episode (the pause of a
  reset is not a control period). nominal period: custom_data control_rate_hz, else the
  episode JSON's control_rate, else the median period. late: periods > 1.5 x nominal.
- image-to-command latency: for each distinct image header stamp, the receive time of the
  first arm command at or after it, minus that stamp.
- chunk latency: receive time of policy/action_chunk minus its header stamp (the policy
  stamps a chunk with its observation's stamp).
- tracking error: measured arm joint positions minus the command in force, i.e. the last
  arm command received strictly before the joint state (zero-order hold); gripper: mean
  finger position minus the commanded opening.
- jerk: 3! x the third divided difference of consecutive arm commands over their
  timestamps; on a uniform grid this is the third difference / dt^3, and it is exact for
  cubic motion on any grid.
- objects_success: the episode's goal checked on the final `objects` markers alone, for
  every family (objects_success's docstring); `objects_disagree` counts the episodes where
  it and the episode JSON's status differ.
- goal changes: per episode, the new instructions sim_node accepted while it ran (the
  episode JSON's goal_changes: sim s since the episode started, and the words), and the
  texts on `task` during the episode that changed nothing (refused, or the running
  instruction again: ignored_instructions, at their receive time).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from arm_act.bags import BagError, BagInfo, bag_info, find_bags, read_bag
from arm_act.ros.conversions import ARM_COMMAND_TOPIC, ARM_JOINTS, GRIPPER_COMMAND_TOPIC, stamp_to_ns
from arm_act.sim.instructions import Goal, parse_goal
from arm_act.sim.robot import JOINT_NAMES
from arm_act.sim.task import ON_TABLE_Z, STACK_XY_TOLERANCE, in_relation_zone

LATE_FACTOR = 1.5


def _topic(info: BagInfo, name: str) -> str | None:
    """The bag topic for a relative name: exact '/name', else the only one ending in '/name'."""
    if "/" + name in info.topics:
        return "/" + name
    matches = [t for t in info.topics if t.endswith("/" + name)]
    return matches[0] if len(matches) == 1 else None


@dataclass
class Series:
    """What the metrics need from one bag, in bag order (times in ns); analyse_bag makes arrays."""

    arm_t: list = field(default_factory=list)
    arm: list = field(default_factory=list)
    gripper_t: list = field(default_factory=list)
    gripper: list = field(default_factory=list)
    joint_t: list = field(default_factory=list)
    joints: list = field(default_factory=list)
    image_stamps: set = field(default_factory=set)
    chunk_latency: list = field(default_factory=list)
    episodes: dict = field(default_factory=dict)  # id -> {"first_t": ns, "status": json, "objects": msg}
    task: str | None = None
    task_messages: list = field(default_factory=list)  # (ns, text) of every message on `task`


def load_series(path: Path, info: BagInfo, allow_incomplete: bool) -> Series:
    names = {key: _topic(info, key) for key in (
        ARM_COMMAND_TOPIC, GRIPPER_COMMAND_TOPIC, "joint_states", "episode", "objects",
        "task", "policy/action_chunk")}
    images = {t for t, topic in info.topics.items() if topic.msgtype == "sensor_msgs/msg/Image"}
    role = {topic: key for key, topic in names.items() if topic is not None}
    series = Series()
    current = None
    for topic, stamp, msg in read_bag(path, list(role) + sorted(images), allow_incomplete=allow_incomplete):
        kind = role.get(topic)
        if topic in images:
            if stamp_to_ns(msg.header.stamp) > 0:
                series.image_stamps.add(stamp_to_ns(msg.header.stamp))
        elif kind == ARM_COMMAND_TOPIC and len(msg.data) == ARM_JOINTS:
            series.arm_t.append(stamp)
            series.arm.append(np.asarray(msg.data, dtype=np.float64))
        elif kind == GRIPPER_COMMAND_TOPIC and len(msg.data) == 1:
            series.gripper_t.append(stamp)
            series.gripper.append(float(msg.data[0]))
        elif kind == "joint_states":
            index = {n: i for i, n in enumerate(msg.name)}
            if all(n in index for n in JOINT_NAMES) and len(msg.position) == len(msg.name):
                series.joint_t.append(stamp)
                series.joints.append(np.asarray([msg.position[index[n]] for n in JOINT_NAMES]))
        elif kind == "episode":
            try:
                status = json.loads(msg.data)
                current = int(status["episode"])
            except (ValueError, KeyError, TypeError):
                continue
            entry = series.episodes.setdefault(current, {"first_t": stamp, "objects": None})
            entry.setdefault("first_status", status)
            entry["status"] = status
        elif kind == "objects":
            series.episodes.setdefault(current, {"first_t": stamp, "status": None})["objects"] = msg
        elif kind == "task":
            series.task = str(msg.data)
            series.task_messages.append((stamp, str(msg.data)))
        elif kind == "policy/action_chunk" and stamp_to_ns(msg.header.stamp) > 0:
            series.chunk_latency.append(stamp - stamp_to_ns(msg.header.stamp))
    return series


# ---------------------------------------------------------------- metric functions (arrays in, numbers out)
def segment_ids(times_ns: np.ndarray, starts_ns: list[int]) -> np.ndarray:
    """Index of the episode each time falls in (episodes start at the sorted starts_ns)."""
    if not starts_ns:
        return np.zeros(len(times_ns), dtype=np.int64)
    return np.searchsorted(np.sort(np.asarray(starts_ns, dtype=np.int64)), times_ns, side="right")


def periods_ns(times_ns: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """Differences of consecutive times that lie in the same segment."""
    same = segments[1:] == segments[:-1]
    return np.diff(times_ns)[same]


def period_stats(periods: np.ndarray, nominal_ns: float | None) -> dict:
    if periods.size == 0:
        return {"periods": 0}
    nominal = float(nominal_ns) if nominal_ns else float(np.median(periods))
    ms = periods * 1e-6
    return {
        "periods": int(periods.size),
        "mean_rate_hz": float(1e9 / periods.mean()),
        "period_p50_ms": float(np.percentile(ms, 50)),
        "period_p99_ms": float(np.percentile(ms, 99)),
        "period_max_ms": float(ms.max()),
        "nominal_period_ms": nominal * 1e-6,
        "late_periods": int(np.count_nonzero(periods > LATE_FACTOR * nominal)),
    }


def latency_stats(latencies_ns) -> dict:
    values = np.asarray(latencies_ns, dtype=np.float64) * 1e-6
    if values.size == 0:
        return {"count": 0}
    return {"count": int(values.size), "mean_ms": float(values.mean()), "p50_ms": float(np.percentile(values, 50)),
            "p99_ms": float(np.percentile(values, 99)), "max_ms": float(values.max())}


def image_to_command_latency(image_stamps_ns, command_times_ns: np.ndarray) -> np.ndarray:
    """Per image stamp: first command time at or after it, minus the stamp (ns)."""
    stamps = np.sort(np.asarray(list(image_stamps_ns), dtype=np.int64))
    if stamps.size == 0 or command_times_ns.size == 0:
        return np.zeros(0, dtype=np.int64)
    commands = np.sort(command_times_ns)
    index = np.searchsorted(commands, stamps, side="left")
    valid = index < commands.size
    return commands[index[valid]] - stamps[valid]


def tracking_errors(state_t: np.ndarray, states: np.ndarray, command_t: np.ndarray, commands: np.ndarray
                    ) -> np.ndarray:
    """states (S, J) minus the command in force (last one strictly before each state) (C, J);
    -> (S', J) for the states that have a command in force."""
    if len(state_t) == 0 or len(command_t) == 0:
        return np.zeros((0, states.shape[1] if states.ndim == 2 else 1))
    order = np.argsort(command_t, kind="stable")
    index = np.searchsorted(command_t[order], state_t, side="left") - 1
    valid = index >= 0
    return states[valid] - commands[order][index[valid]]


def jerk(times_ns: np.ndarray, positions: np.ndarray, segments: np.ndarray) -> np.ndarray:
    """6 x third divided differences of positions (N, J) over times, within segments
    -> (windows, J) in units/s^3. Windows holding two commands with the same stamp are
    left out (a bag stamped in sim time can log two commands in one 10 ms step, e.g. two
    namespaced controllers' or a late one beside its successor): their differences divide
    by zero."""
    if len(times_ns) < 4:
        return np.zeros((0, positions.shape[1] if positions.ndim == 2 else 1))
    t = (times_ns - times_ns[0]) * 1e-9
    with np.errstate(divide="ignore", invalid="ignore"):
        d1 = np.diff(positions, axis=0) / np.diff(t)[:, None]  # (N-1, J)
        d2 = np.diff(d1, axis=0) / (t[2:] - t[:-2])[:, None]  # (N-2, J)
        d3 = np.diff(d2, axis=0) / (t[3:] - t[:-3])[:, None]  # (N-3, J)
    same = (segments[3:] == segments[:-3])
    distinct = np.diff(t) > 0
    window = distinct[:-2] & distinct[1:-1] & distinct[2:]  # the 3 steps of each 4-command window
    return 6.0 * d3[same & window]


def objects_success(objects_msg, instruction: str | None) -> bool | None:
    """From the final object markers, the goal's geometry (sim/task.py's rules, docs/tasks.md):
    box: the named block inside the box footprint and below its rim, no other block in the
    box; stack: the named block on the reference (centre within STACK_XY_TOLERANCE of a block
    size horizontally, one block size +-25 % above it, the reference on the table) and no
    block in the box; relation: both blocks on the table, the named one in the relation's zone
    of the reference, and no block in the box. What the markers cannot show (the gripper open,
    the block at rest) is left to the episode's own status. None when the markers or a
    readable instruction are missing."""
    goal = parse_goal(instruction or "") if instruction else None
    if objects_msg is None or not isinstance(goal, Goal):
        return None
    blocks, box = {}, None
    for marker in objects_msg.markers:
        name, _, colour = marker.text.partition("|")
        p, s = marker.pose.position, marker.scale
        item = (np.array([p.x, p.y, p.z]), np.array([s.x, s.y, s.z]))
        if marker.ns == "box":
            box = item
        elif marker.ns == "block":
            blocks[colour] = item
    if box is None or goal.colour not in blocks or (goal.reference is not None and goal.reference not in blocks):
        return None

    def inside(block) -> bool:
        (position, size), (box_position, box_size) = block, box  # the box's origin is its floor
        half = box_size[:2] / 2 - size[:2] / 2
        top = position[2] + size[2] / 2
        return bool(np.all(np.abs(position[:2] - box_position[:2]) <= half)
                    and top <= box_position[2] + box_size[2] + 0.005)

    def on_table(block) -> bool:
        (position, size) = block
        return bool(abs(position[2] - size[2] / 2) <= ON_TABLE_Z)

    named = blocks[goal.colour]
    if goal.family == "box":
        return inside(named) and not any(inside(b) for c, b in blocks.items() if c != goal.colour)
    if any(inside(b) for b in blocks.values()):
        return False
    reference = blocks[goal.reference]
    if goal.family == "stack":
        (top, size), (bottom, _) = named, reference
        return bool(np.hypot(*(top[:2] - bottom[:2])) <= STACK_XY_TOLERANCE * size[0]
                    and 0.75 * size[2] <= top[2] - bottom[2] <= 1.25 * size[2] and on_table(reference))
    return on_table(named) and on_table(reference) and in_relation_zone(named[0], reference[0], goal.relation)


def goal_changes(status: dict, first_status: dict | None, task_messages: list) -> tuple[list, list]:
    """An episode's goal changes from its last status JSON -> ([{"time", "instruction"}],
    [{"time", "instruction"}] of the `task` texts during it that changed nothing). Times are
    s since the episode started; malformed entries are skipped."""
    changes = []
    for change in status.get("goal_changes") or []:
        if isinstance(change, dict) and isinstance(change.get("time"), (int, float)):
            changes.append({"time": float(change["time"]), "instruction": str(change.get("instruction"))})
    start, length = status.get("start"), status.get("time")
    if not isinstance(start, (int, float)) or not isinstance(length, (int, float)):
        return changes, []
    start_ns, end_ns = int(round(start * 1e9)), int(round((start + length) * 1e9))
    words = {(first_status or status).get("instruction")} | {c["instruction"] for c in changes}
    ignored = [{"time": round((t - start_ns) * 1e-9, 6), "instruction": text} for t, text in task_messages
               if start_ns <= t <= end_ns and text not in words]
    return changes, ignored


def describe_goal_changes(episode: dict) -> str | None:
    """One line of an episode's goal changes ("-> 'words' at 2.00 s"), None without any."""
    parts = [f"-> {c['instruction']!r} at {c['time']:.2f} s" for c in episode.get("goal_changes") or []]
    parts += [f"ignored {c['instruction'][:60]!r} at {c['time']:.2f} s"
              for c in episode.get("ignored_instructions") or []]
    return "; ".join(parts) or None


# ---------------------------------------------------------------- one bag, many bags
@dataclass
class BagAnalysis:
    path: Path
    info: BagInfo
    series: Series
    metrics: dict
    arm_periods: np.ndarray
    gripper_periods: np.ndarray
    latencies: np.ndarray
    errors: np.ndarray  # (S, 7) rad
    gripper_errors: np.ndarray  # (S,) m
    jerks: np.ndarray  # (W, 7) rad/s^3


def _rms(values: np.ndarray) -> float | None:
    return float(np.sqrt(np.mean(np.square(values)))) if values.size else None


def _nominal_ns(info: BagInfo, series: Series) -> float | None:
    for key in ("control_rate_hz", "control_rate"):
        if key in info.custom_data:
            try:
                return 1e9 / float(info.custom_data[key])
            except (ValueError, ZeroDivisionError):
                pass
    rates = [e["status"].get("control_rate") for e in series.episodes.values() if e.get("status")]
    rates = [r for r in rates if isinstance(r, (int, float)) and r > 0]
    return 1e9 / rates[0] if rates else None


def analyse_bag(path, *, allow_incomplete: bool = False) -> BagAnalysis:
    info = bag_info(path)
    if not info.complete and not allow_incomplete:
        raise BagError(f"{info.path}: incomplete bag: {info.problem} (pass --allow-incomplete to include it)")
    series = load_series(info.path, info, allow_incomplete)
    # Episode k > 0 starts at its first status message; the first episode covers the bag start.
    starts = sorted(e["first_t"] for k, e in series.episodes.items() if k is not None)[1:]
    arm_t, gripper_t, joint_t = (np.asarray(x, dtype=np.int64)
                                 for x in (series.arm_t, series.gripper_t, series.joint_t))
    arm = np.asarray(series.arm, dtype=np.float64).reshape(-1, ARM_JOINTS)
    joints = np.asarray(series.joints, dtype=np.float64).reshape(-1, len(JOINT_NAMES))
    nominal = _nominal_ns(info, series)
    arm_segments = segment_ids(arm_t, starts)
    arm_periods = periods_ns(arm_t, arm_segments)
    gripper_periods = periods_ns(gripper_t, segment_ids(gripper_t, starts))
    latencies = image_to_command_latency(series.image_stamps, arm_t)
    errors = tracking_errors(joint_t, joints[:, :ARM_JOINTS], arm_t, arm)
    gripper_errors = tracking_errors(joint_t, joints[:, ARM_JOINTS:].mean(axis=1, keepdims=True), gripper_t,
                                     np.asarray(series.gripper, dtype=np.float64).reshape(-1, 1))[:, 0]
    jerks = jerk(arm_t, arm, arm_segments)

    episodes = []
    for episode_id in sorted(k for k in series.episodes if k is not None):
        entry = series.episodes[episode_id]
        status = entry.get("status") or {}
        state = status.get("state")
        changes, ignored = goal_changes(status, entry.get("first_status"), series.task_messages)
        first = (entry.get("first_status") or status).get("instruction")
        episodes.append({
            "episode": episode_id, "seed": status.get("seed"), "n_blocks": status.get("n_blocks"),
            "instruction": status.get("instruction"), "state": state,
            "success": None if state in (None, "running") else state == "success",
            "objects_success": objects_success(entry.get("objects"), status.get("instruction") or series.task),
            "duration_s": status.get("time"),
            **({"first_instruction": first, "goal_changes": changes} if changes else {}),
            **({"ignored_instructions": ignored} if ignored else {}),
        })
    metrics = {
        "bag": str(info.path), "complete": info.complete, "problem": info.problem,
        "duration_s": info.duration_s, "messages": info.message_count, "episodes": episodes,
        "arm_commands": {"count": int(arm_t.size), **period_stats(arm_periods, nominal)},
        "gripper_commands": {"count": int(gripper_t.size), **period_stats(gripper_periods, nominal)},
        "image_to_command_latency": latency_stats(latencies),
        "chunk_latency": latency_stats(series.chunk_latency),
        "tracking_rms_rad": _rms(errors), "tracking_max_rad": float(np.abs(errors).max()) if errors.size else None,
        "tracking_rms_per_joint_rad": np.sqrt(np.mean(np.square(errors), axis=0)).tolist() if errors.size else None,
        "gripper_tracking_rms_m": _rms(gripper_errors),
        "jerk_rms": _rms(jerks), "jerk_max": float(np.abs(jerks).max()) if jerks.size else None,
    }
    return BagAnalysis(info.path, info, series, metrics, arm_periods, gripper_periods, latencies, errors,
                       gripper_errors, jerks)


def aggregate(analyses: list[BagAnalysis]) -> dict:
    episodes = [e for a in analyses for e in a.metrics["episodes"]]
    finished = [e for e in episodes if e["success"] is not None]
    durations = [e["duration_s"] for e in finished if isinstance(e["duration_s"], (int, float))]
    nominal = next((a.metrics["arm_commands"].get("nominal_period_ms") for a in analyses
                    if a.metrics["arm_commands"].get("periods")), None)

    def concat(arrays):
        return np.concatenate(arrays) if arrays else np.zeros(0)

    errors = concat([a.errors.ravel() for a in analyses])
    jerks = concat([a.jerks.ravel() for a in analyses])
    return {
        "bags": len(analyses),
        "incomplete_bags": sum(not a.info.complete for a in analyses),
        "episodes": len(episodes),
        "finished_episodes": len(finished),
        "successes": sum(bool(e["success"]) for e in finished),
        "success_rate": sum(bool(e["success"]) for e in finished) / len(finished) if finished else None,
        "objects_disagree": sum(e["objects_success"] is not None and e["success"] is not None
                                and e["objects_success"] != e["success"] for e in episodes),
        "mean_episode_duration_s": float(np.mean(durations)) if durations else None,
        "arm_commands": period_stats(concat([a.arm_periods for a in analyses]),
                                     nominal * 1e6 if nominal else None),
        "gripper_commands": period_stats(concat([a.gripper_periods for a in analyses]),
                                         nominal * 1e6 if nominal else None),
        "image_to_command_latency": latency_stats(concat([a.latencies for a in analyses])),
        "tracking_rms_rad": _rms(errors),
        "jerk_rms": _rms(jerks),
    }


# ---------------------------------------------------------------- plots and summary
def _figure(width: float, height: float):
    # Figure + Agg canvas directly: no pyplot global state, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def plot_bag(analysis: BagAnalysis, out_dir: Path, prefix: str) -> list[Path]:
    """<prefix>_joints.png (commands vs measured positions) and <prefix>_periods.png."""
    s = analysis.series
    times = [t for t in (s.arm_t[:1] + s.joint_t[:1] + s.gripper_t[:1])]
    t0 = min(times) if times else 0

    def sec(values):
        return (np.asarray(values, dtype=np.int64) - t0) * 1e-9

    arm = np.asarray(s.arm, dtype=np.float64).reshape(-1, ARM_JOINTS)
    joints = np.asarray(s.joints, dtype=np.float64).reshape(-1, len(JOINT_NAMES))
    figure = _figure(11, 9)
    axes = figure.subplots(4, 2, sharex=True).ravel()
    for j, ax in enumerate(axes):
        if j < ARM_JOINTS:
            ax.step(sec(s.arm_t), arm[:, j], where="post", label="command")
            ax.plot(sec(s.joint_t), joints[:, j], label="measured")
            ax.set_ylabel(f"{JOINT_NAMES[j]} (rad)")
        else:
            ax.step(sec(s.gripper_t), s.gripper, where="post", label="command")
            ax.plot(sec(s.joint_t), joints[:, ARM_JOINTS:].mean(axis=1), label="measured (finger mean)")
            ax.set_ylabel("gripper opening (m)")
    axes[0].legend(loc="best", fontsize="small")
    for ax in axes[-2:]:
        ax.set_xlabel("bag time (s)")
    figure.suptitle(f"{analysis.path.name}: joint commands and states")
    joints_png = out_dir / f"{prefix}_joints.png"
    figure.savefig(joints_png, dpi=80)

    figure = _figure(7, 4)
    ax = figure.subplots()
    for name, periods in (("arm", analysis.arm_periods), ("gripper", analysis.gripper_periods)):
        if periods.size:
            ax.hist(periods * 1e-6, bins=50, histtype="step", linewidth=2, label=f"{name} ({periods.size})")
    nominal = analysis.metrics["arm_commands"].get("nominal_period_ms")
    if nominal:
        ax.axvline(nominal, color="k", linestyle="--", label="nominal")
        ax.axvline(LATE_FACTOR * nominal, color="r", linestyle=":", label=f"{LATE_FACTOR} x nominal")
    ax.set_yscale("log")  # late periods are rare: keep them visible next to thousands of good ones
    ax.yaxis.set_major_formatter("{x:.0f}")
    ax.set_xlabel("command period (ms)")
    ax.set_ylabel("count")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    ax.set_title(f"{analysis.path.name}: command periods")
    periods_png = out_dir / f"{prefix}_periods.png"
    figure.savefig(periods_png, dpi=80)
    return [joints_png, periods_png]


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "-"
    return f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def bag_line(metrics: dict) -> str:
    """One line per bag for the terminal and the markdown table."""
    episodes = metrics["episodes"]
    finished = [e for e in episodes if e["success"] is not None]
    arm, latency = metrics["arm_commands"], metrics["image_to_command_latency"]
    return (f"{'success' if finished and all(e['success'] for e in finished) else 'FAIL' if finished else 'unfinished'}"
            f" ({sum(bool(e['success']) for e in finished)}/{len(episodes)} episodes)"
            f"{'' if metrics['complete'] else ' INCOMPLETE'}, {metrics['duration_s']:.2f} s,"
            f" arm {_fmt(arm.get('mean_rate_hz'))} Hz (p99 {_fmt(arm.get('period_p99_ms'))} ms,"
            f" {arm.get('late_periods', 0)} late), image->command p50 {_fmt(latency.get('p50_ms'))} ms,"
            f" tracking RMS {_fmt(metrics['tracking_rms_rad'])} rad, jerk RMS {_fmt(metrics['jerk_rms'])} rad/s^3")


def aggregate_line(summary: dict) -> str:
    arm = summary["arm_commands"]
    rate = summary["success_rate"]
    return (f"{summary['bags']} bags ({summary['incomplete_bags']} incomplete), {summary['episodes']} episodes,"
            f" {summary['successes']}/{summary['finished_episodes']} successful"
            f" ({'-' if rate is None else f'{rate:.0%}'}), arm {_fmt(arm.get('mean_rate_hz'))} Hz,"
            f" {arm.get('late_periods', 0)} late periods, tracking RMS {_fmt(summary['tracking_rms_rad'])} rad")


def write_report(analyses: list[BagAnalysis], summary: dict, out_dir: Path, plots: bool = True) -> list[Path]:
    """Plots per bag, summary.md and report.json in out_dir; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    lines = ["# arm-act report", "", aggregate_line(summary), "",
             "| bag | result | plots |", "|---|---|---|"]
    for index, analysis in enumerate(analyses):
        files = plot_bag(analysis, out_dir, f"{index:03d}_{analysis.path.name}") if plots else []
        written += files
        links = " ".join(f"[{f.name.rsplit('_', 1)[1][:-4]}]({f.name})" for f in files)
        lines.append(f"| {analysis.path} | {bag_line(analysis.metrics)} | {links} |")
    changed = [(a.path, e) for a in analyses for e in a.metrics["episodes"] if describe_goal_changes(e)]
    if changed:
        lines += ["", "## Goal changes", "", "| bag | episode | first instruction | changes |", "|---|---|---|---|"]
        lines += [f"| {path} | {e['episode']} | {e.get('first_instruction') or e['instruction']} | "
                  f"{describe_goal_changes(e)} |" for path, e in changed]
    lines += ["", "Definitions: see the docstring of arm_act/eval/report.py.", ""]
    (out_dir / "summary.md").write_text("\n".join(lines))
    (out_dir / "report.json").write_text(json.dumps(
        {"bags": [a.metrics for a in analyses], "aggregate": summary}, indent=1))
    return written + [out_dir / "summary.md", out_dir / "report.json"]


def report_bags(paths, out_dir: Path, *, allow_incomplete: bool = False,
                plots: bool = True) -> tuple[list[BagAnalysis], dict, list[Path]]:
    """`arm-act report`: the bags the paths name (arm_act.bags.find_bags), each analysed,
    the aggregate, and the report written into out_dir -> (analyses, aggregate, files).
    Raises BagError (one line) for a path that names no bag or a bag that cannot be read,
    OSError when out_dir cannot be written."""
    analyses = []
    for bag in find_bags(paths):
        try:
            analyses.append(analyse_bag(bag, allow_incomplete=allow_incomplete))
        except BagError:
            raise
        except Exception as exc:  # noqa: BLE001 - a damaged file deep inside a reader: one line
            raise BagError(f"{bag}: cannot read bag ({type(exc).__name__}: {exc})") from None
    summary = aggregate(analyses)
    return analyses, summary, write_report(analyses, summary, out_dir, plots=plots)
