"""Kill a node mid-episode, start it again, and see whether the next episode succeeds.

    python benchmarks/fault_episodes.py --cycles 10 --out benchmarks/results/faults/episodes.json

sim_node and policy_node (the shipped checkpoint unless --checkpoint) run as two `ros2 run`
processes in real time on a private domain, as tests/test_faults.py starts them. For each
victim (policy_node, then sim_node) and each cycle: once an episode has run a drawn 0.5-3 s,
the victim's process group gets SIGKILL and a new process is started in its place. Recorded
per cycle: the seconds from the kill until commands come at the control rate again, whether
the other node kept its process, and the outcome of the first episode that starts after the
loop resumed. Every episode that ran with no kill inside it is the baseline of the same run.

The long form of the kill-and-restart tests in `make test` (those use a tiny random
checkpoint and check that commands resume; this one checks that episodes still succeed).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

RATE_WINDOW_S = 1.0
RESUME_WAIT_S = 60.0  # a restarted node not commanding by then is counted as not resumed
RATE_MIN = 25  # commands in the last second that count as "commanding at the control rate" (50 Hz)


class Loop:
    """The two node processes, and a probe of /episode and the arm commands."""

    def __init__(self, context, logs: Path, checkpoint: str | None):
        from rclpy.node import Node
        from std_msgs.msg import Float64MultiArray, String

        from arm_act.ros.qos import TRANSIENT_LOCAL

        self.logs, self.procs, self.starts = logs, {}, {}
        self.params = []
        if checkpoint:
            params = logs / "policy_params.yaml"
            params.write_text(f"/**:\n  ros__parameters:\n    checkpoint: {json.dumps(checkpoint)}\n")
            self.params = ["--ros-args", "--params-file", str(params)]
        self.env = dict(os.environ, ROS_DOMAIN_ID=str(context.get_domain_id()),
                        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST")
        self.node = Node("fault_probe", context=context)
        self.episodes: list[tuple[float, dict]] = []  # (arrival, message) in arrival order
        self.commands: list[float] = []
        self.node.create_subscription(String, "/episode",
                                      lambda m: self.episodes.append((time.monotonic(), json.loads(m.data))),
                                      TRANSIENT_LOCAL)
        self.node.create_subscription(Float64MultiArray, "/arm_controller/commands",
                                      lambda m: self.commands.append(time.monotonic()), 100)
        from rclpy.executors import SingleThreadedExecutor

        self.executor = SingleThreadedExecutor(context=context)
        self.executor.add_node(self.node)

    def start(self, label: str) -> None:
        exe = str(Path(sys.executable).parent / label)
        log = open(self.logs / f"{label}.{len(self.starts.get(label, []))}.log", "w")  # noqa: SIM115 - open for the process's life
        proc = subprocess.Popen([exe, *(self.params if label == "policy_node" else [])], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[label] = (proc, log)
        self.starts.setdefault(label, []).append(time.monotonic())

    def kill(self, label: str) -> None:
        proc, log = self.procs[label]
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        log.close()

    def pid(self, label: str) -> int:
        return self.procs[label][0].pid

    def commanding(self) -> bool:
        now = time.monotonic()
        return sum(t > now - RATE_WINDOW_S for t in self.commands[-200:]) >= RATE_MIN

    def spin_until(self, condition, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not condition():
            self.executor.spin_once(timeout_sec=0.02)
        return condition()

    def running_since(self) -> float | None:
        """Arrival of the newest episode's "running" message, when it is still running."""
        if not self.episodes or self.episodes[-1][1]["state"] != "running":
            return None
        return self.episodes[-1][0]

    def outcome_of_first_episode_after(self, moment: float, timeout: float) -> dict | None:
        """The final message of the first episode whose "running" came after `moment`."""
        def found():
            started = None
            for arrival, msg in self.episodes:
                if started is None and arrival > moment and msg["state"] == "running":
                    started = msg["episode"]
                elif started is not None and msg["episode"] == started and msg["state"] != "running":
                    return msg
            return None

        self.spin_until(lambda: found() is not None, timeout)
        return found()

    def close(self) -> None:
        for label in list(self.procs):
            proc, log = self.procs[label]
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            log.close()
        self.node.destroy_node()
        self.executor.shutdown()


def run_cycle(loop: Loop, victim: str, rng: random.Random) -> dict:
    other = "sim_node" if victim == "policy_node" else "policy_node"
    if not loop.spin_until(lambda: loop.commanding() and loop.running_since() is not None, 120):
        raise RuntimeError("no running episode with commands at the rate within 120 s")
    into = rng.uniform(0.5, 3.0)
    started = loop.running_since()
    loop.spin_until(lambda: time.monotonic() > started + into or loop.running_since() != started, into + 1)
    other_pid = loop.pid(other)
    loop.kill(victim)
    killed = time.monotonic()
    if victim == "sim_node":
        loop.spin_until(lambda: not loop.commands or loop.commands[-1] < time.monotonic() - 0.5, 10)
    loop.start(victim)
    resumed = loop.spin_until(lambda: loop.commanding() and loop.commands[-1] > killed + 1.0, RESUME_WAIT_S)
    resumed_at = time.monotonic()
    restarts = 0
    while not resumed and restarts < 3:  # never came back: what a supervisor (launch's respawn) would do
        restarts += 1
        loop.kill(victim)
        again = time.monotonic()
        loop.start(victim)
        resumed = loop.spin_until(lambda t=again: loop.commanding() and loop.commands[-1] > t + 1.0, RESUME_WAIT_S)
    outcome = loop.outcome_of_first_episode_after(time.monotonic(), 120) if resumed else None
    return {"victim": victim, "killed_into_episode_s": round(into, 2),
            "resumed_after_s": round(resumed_at - killed, 2) if resumed and not restarts else None,
            "extra_restarts": restarts, "resumed_in_the_end": bool(resumed),
            "other_kept_its_process": loop.pid(other) == other_pid and loop.procs[other][0].poll() is None,
            "next_episode": None if outcome is None else {k: outcome[k] for k in ("episode", "seed", "state", "time")},
            "kill_at": killed, "resumed_at": resumed_at}


def baseline(loop: Loop, cycles: list[dict]) -> dict:
    """Episodes that ran start to end with no kill inside them."""
    kills = [(c["kill_at"], c["resumed_at"]) for c in cycles]
    running: dict[tuple, float] = {}
    outcomes = []
    for arrival, msg in loop.episodes:
        key = (msg["episode"], msg["seed"])
        if msg["state"] == "running":
            running.setdefault(key, arrival)
        elif key in running:
            start = running.pop(key)
            if not any(start - 1.0 <= k <= arrival + 1.0 or start <= r <= arrival for k, r in kills):
                outcomes.append(msg["state"])
    return {"episodes": len(outcomes), "successes": outcomes.count("success")}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=10, help="kills per victim")
    parser.add_argument("--victims", default="policy_node,sim_node")
    parser.add_argument("--checkpoint", help="policy_node's checkpoint (default: the shipped one)")
    parser.add_argument("--domain", type=int, default=201)
    parser.add_argument("--seed", type=int, default=0, help="seeds when, in an episode, each kill comes")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--logs", type=Path, help="the nodes' logs (default: OUT's stem + _logs beside it)")
    args = parser.parse_args(argv)

    import rclpy

    args.out.parent.mkdir(parents=True, exist_ok=True)
    logs = args.logs or args.out.parent / (args.out.stem + "_logs")
    logs.mkdir(parents=True, exist_ok=True)
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=args.domain)
    loop = Loop(context, logs, args.checkpoint)
    rng = random.Random(args.seed)
    cycles = []
    error = None
    try:
        loop.start("sim_node")
        loop.start("policy_node")
        for victim in args.victims.split(","):
            for i in range(args.cycles):
                try:
                    cycle = run_cycle(loop, victim, rng)
                except RuntimeError as exc:  # the loop is down for good: keep what was measured
                    error = f"{victim} #{i + 1}: {exc}"
                    print(error, flush=True)
                    break
                cycles.append(cycle)
                nxt = cycle["next_episode"]
                print(f"{victim} #{i + 1}: resumed after {cycle['resumed_after_s']} s "
                      f"(extra restarts {cycle['extra_restarts']}), next episode {nxt['state'] if nxt else 'none'}, "
                      f"other kept its process: {cycle['other_kept_its_process']}", flush=True)
            if error:
                break
    finally:
        loop.close()
        rclpy.shutdown(context=context)
    summary = {}
    for victim in args.victims.split(","):
        mine = [c for c in cycles if c["victim"] == victim]
        resumed = sorted(c["resumed_after_s"] for c in mine if c["resumed_after_s"] is not None)
        summary[victim] = {
            "cycles": len(mine), "resumed": len(resumed),
            "resumed_only_after_another_restart": sum(c["extra_restarts"] > 0 and c["resumed_in_the_end"]
                                                      for c in mine),
            "never_resumed": sum(not c["resumed_in_the_end"] for c in mine),
            "resumed_after_s_median": resumed[len(resumed) // 2] if resumed else None,
            "resumed_after_s_max": resumed[-1] if resumed else None,
            "next_episode_successes": sum(bool(c["next_episode"]) and c["next_episode"]["state"] == "success"
                                          for c in mine),
            "other_kept_its_process": all(c["other_kept_its_process"] for c in mine)}
    result = {"checkpoint": args.checkpoint or "checkpoints/default", "seed": args.seed, "error": error,
              "summary": summary,
              "baseline": baseline(loop, cycles),
              "cycles": [{k: v for k, v in c.items() if k not in ("kill_at", "resumed_at")} for c in cycles]}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({"summary": summary, "baseline": result["baseline"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
