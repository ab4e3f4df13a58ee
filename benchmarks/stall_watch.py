"""Whole-machine stalls beside a live-loop run: does a late control period come with every
CPU of the machine stopped at once?

    python benchmarks/stall_watch.py --seconds 620 --out stalls.json &
    arm-act bench --ros-only --ros-seconds 600 --camera-rate 10 --backend onnx --out run.json
    python benchmarks/stall_watch.py --match run.json stalls.json

One child process per CPU, pinned to it and on SCHED_FIFO 98 where permitted (above the
nodes' 50), sleeps 1 ms at a time and records every wake-up more than --threshold-ms late
(CLOCK_MONOTONIC, as `arm-act bench` uses): a cyclictest in miniature. A stall seen on every
CPU at the same moment is the machine stopped as a whole (the hypervisor, or the guest kernel
with every CPU held), which no scheduling inside the guest can avoid; a stall on one CPU is
work on that CPU above priority 98 or with interrupts off. --match prints, for each late
period of a bench JSON (its late_periods, at_s from window_start_monotonic_s), the stalls
that overlap it, and the same for each of sim_node's own late publications the bench recorded
(ros_sim_loop's `late` and `late_over_10ms`: the wait before it, how late it woke, and the work after it),
and for each of policy_node's late answers (ros_policy_answers' `late`).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

WATCH_PRIORITY = 98


def watch(cpu: int, seconds: float, threshold_ms: float, queue) -> None:
    """On one CPU: (wall s when the late wake-up came, ms it was late) for each late wake-up."""
    os.sched_setaffinity(0, {cpu})
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(WATCH_PRIORITY))
        fifo = True
    except (PermissionError, OSError):
        fifo = False
    stalls, wakeups, worst = [], 0, 0.0
    end = time.monotonic() + seconds
    before = time.monotonic()
    while before < end:
        time.sleep(0.001)
        now = time.monotonic()
        late_ms = (now - before) * 1e3 - 1.0
        wakeups += 1
        worst = max(worst, late_ms)
        if late_ms > threshold_ms:
            stalls.append((round(now, 6), round(late_ms, 2)))
        before = now
    queue.put({"cpu": cpu, "fifo": fifo, "wakeups": wakeups, "worst_ms": round(worst, 2), "stalls": stalls})


def record(seconds: float, threshold_ms: float) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    queue = mp.Queue()
    procs = [mp.Process(target=watch, args=(cpu, seconds, threshold_ms, queue), daemon=True) for cpu in cpus]
    for proc in procs:
        proc.start()
    per_cpu = sorted((queue.get() for _ in procs), key=lambda r: r["cpu"])
    for proc in procs:
        proc.join()
    return {"seconds": seconds, "threshold_ms": threshold_ms, "cpus": per_cpu}


def overlapping(stalls: dict, w0: float, w1: float) -> list[tuple[int, float, float]]:
    """(cpu, start s, ms) of every stall that overlaps wall span w0..w1 (monotonic s)."""
    out = []
    for row in stalls["cpus"]:
        for at, ms in row["stalls"]:
            start = at - ms / 1e3
            if start < w1 and at > w0:
                out.append((row["cpu"], round(start, 4), ms))
    return out


def around(stalls: dict, w0: float, w1: float) -> str:
    """The stalls over wall span w0..w1 (monotonic s), in words: every CPU, some, or none."""
    seen = overlapping(stalls, w0, w1)
    every = bool(seen) and {cpu for cpu, _, _ in seen} == {row["cpu"] for row in stalls["cpus"]}
    return ("every CPU stalled: " if every else "stalls: " if seen else "no stall on any CPU") + \
        ", ".join(f"CPU {cpu} {ms} ms" for cpu, _, ms in seen)


def match(bench: dict, stalls: dict) -> list[str]:
    origin = bench.get("window_start_monotonic_s")
    if origin is None:
        raise SystemExit("the bench JSON has no window_start_monotonic_s (made before it was recorded)")
    lines = []
    for period in bench.get("late_periods") or []:
        w1 = origin + period["at_s"]
        w0 = w1 - max(period["received_ms"], period["sent_ms"]) / 1e3
        what = around(stalls, w0, w1)
        lines.append(f"late period at {period['at_s']} s (received {period['received_ms']} ms, sent "
                     f"{period['sent_ms']} ms, sim {period['sim_ms']} ms): {what}")
    loop = bench.get("ros_sim_loop") or {}
    events = {e["monotonic_s"]: e for e in (loop.get("late") or []) + (loop.get("late_over_10ms") or [])}
    for event in sorted(events.values(), key=lambda e: e["monotonic_s"]):
        # sim_node's own late publications (arm_act.nodes.loop_timing): from the deadline of the
        # wait before the work (or the work's start) to the moment the publication was reached.
        w1 = event["monotonic_s"]
        w0 = w1 - ((event.get("work_ms") or 0.0) + event.get("wake_late_ms", 0.0)) / 1e3
        what = around(stalls, w0, w1)
        lines.append(
            f"sim_node late {event['late_ms']} ms at {w1 - origin:.3f} s ({event.get('what', 'tick')}, "
            f"episode {event['episode']}, "
            f"{event['sim_s']} s in): woke {event['wake_late_ms']} ms late, then {event['work_ms']} ms of work: "
            f"{event['steps']} step(s) {event['step_ms']} ms ({event['step_cpu_ms']} CPU), {event['renders']} "
            f"render(s) {event['render_ms']} ms ({event['render_cpu_ms']} CPU); last control tick "
            f"{event.get('since_tick_ms')} ms before, its arm command after {event.get('answer_ms')} ms; {what}")
    for event in (bench.get("ros_policy_answers") or {}).get("late") or []:
        # policy_node's late answers (AnswerTiming): since its answer before.
        w1 = event["monotonic_s"]
        what = around(stalls, w1 - (event.get("since_previous_ms") or event["act_ms"]) / 1e3, w1)
        lines.append(f"policy_node answered the tick at {event['stamp_s']} s {event.get('since_previous_ms')} ms "
                     f"after its answer before, at {w1 - origin:.3f} s: /clock from sim_node's write to the callback "
                     f"{event.get('clock_to_callback_ms')} ms, the joint state {event.get('joint_after_clock_ms')} ms "
                     f"after the /clock, its own work {event['act_ms']} ms; {what}")
    for row in stalls["cpus"]:
        lines.append(f"CPU {row['cpu']}: {len(row['stalls'])} wake-ups over {stalls['threshold_ms']} ms late of "
                     f"{row['wakeups']}, worst {row['worst_ms']} ms ({'SCHED_FIFO' if row['fifo'] else 'normal'})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=620.0)
    parser.add_argument("--threshold-ms", type=float, default=5.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--match", nargs=2, metavar=("BENCH_JSON", "STALLS_JSON"))
    args = parser.parse_args(argv)
    if args.match:
        bench, stalls = (json.loads(Path(p).read_text()) for p in args.match)
        print("\n".join(match(bench, stalls)))
        return 0
    if args.out is None:
        parser.error("--out FILE (or --match BENCH_JSON STALLS_JSON)")
    result = record(args.seconds, args.threshold_ms)
    args.out.write_text(json.dumps(result, indent=1))
    for row in result["cpus"]:
        print(f"CPU {row['cpu']}: {len(row['stalls'])} late wake-ups, worst {row['worst_ms']} ms", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
