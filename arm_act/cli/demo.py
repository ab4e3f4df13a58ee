"""`arm-act demo`: the main job on a plain machine (`make run`).

sim_node and policy_node run as child processes talking over ROS 2 topics (DDS), exactly
the executables `ros2 launch arm_act bringup.launch.py` starts; this process is a viewer
node that prints a line per finished episode and shows both cameras with the policy's
cross-attention over the patches, the instruction and commanded vs actual gripper: in a
window when a display exists, into a video file otherwise. Ctrl-C stops every child cleanly.

Why child processes: that is what `ros2 launch` runs, each process has its own GIL
(PyBullet's renderer holds it for a whole render call), and a crash in one node cannot take
the others down. Composed in one process the control rate holds too, with slightly slower
inference (docs/architecture.md, "Threading"; `arm-act bench --arrangement single`).
Without a trained checkpoint the scripted expert (expert_node) drives the arm instead.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from arm_act.cli.eval import add_assist_argument, add_setting, add_task_arguments
from arm_act.cli.main import CommandError
from arm_act.cli.view import add_attention_argument
from arm_act.common.paths import config_file, default_checkpoint
from arm_act.common.processes import NodeProcesses, ros_args


def configure(parser) -> None:
    parser.add_argument("--episodes", type=int, default=5, help="episodes to run (0: until Ctrl-C)")
    parser.add_argument("--seed", type=int, default=0, help="first episode's seed")
    parser.add_argument("--blocks", default="2-5", help="block count N or range LO-HI")
    parser.add_argument("--checkpoint", type=Path, default=None,
                        help="policy checkpoint (default: the shipped one; the expert if none exists)")
    parser.add_argument("--expert", action="store_true", help="drive with the scripted expert")
    parser.add_argument("--record", type=Path, help="record a rosbag2 MCAP bag into this directory")
    parser.add_argument("--gui", action="store_true", help="open PyBullet's own viewer")
    parser.add_argument("--video", type=Path, help="write the live view to this MP4 (default when no display)")
    parser.add_argument("--no-view", action="store_true", help="neither window nor video")
    parser.add_argument("--viewer", choices=("auto", "rerun"), default="auto",
                        help="auto: window or MP4 (above); rerun: stream the run to Rerun (docs/viewer.md)")
    parser.add_argument("--save", type=Path, metavar="FILE.rrd", help="with --viewer rerun: write the recording here")
    parser.add_argument("--web", action="store_true",
                        help="with --viewer rerun: serve Rerun's web viewer on 127.0.0.1, up until Ctrl-C")
    parser.add_argument("--port", type=int, default=9090, help="web viewer port (default 9090; 0: any free port)")
    add_attention_argument(parser)
    parser.add_argument("--camera-rate", type=int, default=10, help="Hz")
    parser.add_argument("--control-rate", type=int, default=50, help="Hz")
    parser.add_argument("--time-limit", type=float, default=20.0, help="episode time limit, sim seconds")
    add_task_arguments(parser)
    add_assist_argument(parser)
    add_setting(parser, "execution")
    parser.add_argument("--real-time-factor", type=float, default=1.0,
                        help="sim speed vs wall clock (0: as fast as it goes)")
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID for the nodes")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def _open_rerun(args):
    """The Rerun output (arm_act.view.live): its bridge node spins on a thread of its own."""
    from arm_act.view import ViewerError
    from arm_act.view.live import LiveRerun

    try:
        live = LiveRerun(save=args.save, web=args.web, port=args.port, attention=args.attention)
    except ViewerError as exc:
        raise CommandError(str(exc)) from None
    if live.url:
        print(f"web viewer: {live.url}", flush=True)
    return live


def _start_nodes(children: NodeProcesses, args, env: dict, checkpoint: Path | None) -> None:
    """The demo's nodes as child processes: bag_recorder (with --record), policy_node on
    `checkpoint` (expert_node when None), then sim_node, which starts the first episode."""
    common = {"use_sim_time": True, "mode": "realtime", "control_rate": args.control_rate}
    if args.record is not None:
        if args.record.exists():
            raise CommandError(f"--record {args.record} exists already; bags are never overwritten")
        children.start("bag_recorder", "arm_act.nodes.bag_recorder",
                       ros_args({"use_sim_time": True, "bag_path": str(args.record)}), env)
    if checkpoint is None:
        children.start("expert_node", "arm_act.nodes.expert_node", ros_args(common), env)
    else:
        children.start("policy_node", "arm_act.nodes.policy_node", ros_args(
            {"execution": args.execution, "assist": args.assist, **common, "checkpoint": str(checkpoint)},
            config_file("policy.yaml")), env)
    children.start("sim_node", "arm_act.nodes.sim_node", ros_args({
        **common, "seed": args.seed, "blocks": args.blocks, "episodes": args.episodes,
        "camera_rate": args.camera_rate, "gui": args.gui, "real_time_factor": args.real_time_factor,
        "episode_time_limit": args.time_limit, "task": args.task, "instruction": args.instruction or "",
        # The recording holds the first episode whole; the viewer, not the sim's exit, ends the demo.
        "wait_for_recorder": args.record is not None, "exit_when_done": False,
    }, config_file("sim.yaml")), env)


def _print_outputs(args, results: list[dict], view) -> None:
    """The episodes' tally and where the video and the bag went."""
    if results:
        successes = sum(r["success"] for r in results)
        print(f"{successes}/{len(results)} episodes succeeded")
    if view is not None and view.path is not None:
        if view.frames:
            print(f"live view written to {view.path} ({view.frames} frames)")
        else:
            print(f"no camera frames reached the viewer; {view.path} was not written", file=sys.stderr)
    if args.record is not None:
        print(f"bag written to {args.record}")


def run(args) -> int:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from arm_act.nodes.viewer_node import DemoViewer, open_view

    if args.episodes < 0:
        raise CommandError(f"--episodes {args.episodes} must be >= 0")
    if args.instruction is not None:
        from arm_act.sim.instructions import parse_goal_or_raise

        try:  # words that give no goal at all; sim_node checks each episode's blocks
            parse_goal_or_raise(args.instruction)
        except ValueError as exc:
            raise CommandError(f"--instruction: {exc}") from None
    checkpoint = args.checkpoint or default_checkpoint()
    use_expert = args.expert or not (checkpoint / "model.safetensors").is_file()
    if args.checkpoint is not None and use_expert and not args.expert:
        raise CommandError(f"{args.checkpoint} is not a checkpoint directory (no model.safetensors)")
    if use_expert and not args.expert:
        print(f"no trained policy at {checkpoint}: the scripted expert drives the arm", flush=True)

    env = dict(os.environ)
    if args.domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(args.domain_id)
    env.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    children = NodeProcesses()
    view = live = None
    rclpy.init(args=None, domain_id=int(env.get("ROS_DOMAIN_ID", "0")))
    signal.signal(signal.SIGTERM, _raise_interrupt)  # `kill` stops the children too
    viewer = DemoViewer(episodes=args.episodes,  # frames only for a window or an MP4
                        compose=not args.no_view and (args.viewer != "rerun" or args.video is not None))
    executor = SingleThreadedExecutor()
    executor.add_node(viewer)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    interrupted = False
    try:
        live = _open_rerun(args) if args.viewer == "rerun" else None
        view = None if args.no_view or (live is not None and args.video is None) else open_view(args.video)
        _start_nodes(children, args, env, None if use_expert else checkpoint)
        while not viewer.done.is_set():
            problem = children.failed()
            if problem:
                raise CommandError(problem)
            frame = viewer.take_frame(timeout=0.1)
            if frame is not None and view is not None:
                view.show(frame)
    except KeyboardInterrupt:
        interrupted = True
        print("\ninterrupted: stopping the nodes", file=sys.stderr)
    finally:
        children.stop()
        executor.shutdown(timeout_sec=2.0)
        # Join the spinner before tearing down rclpy, as ros_eval does: a daemon thread still
        # inside rclpy's C++ wait at interpreter exit aborts the process ("terminate called
        # without an active exception", exit -6, about 1 run in 5 here).
        spinner.join(timeout=5.0)
        viewer.destroy_node()
        if live is not None:
            live.close()
        if rclpy.ok():
            rclpy.shutdown()
        if view is not None:
            view.close()
    _print_outputs(args, viewer.results, view)
    if live is not None:
        if live.save is not None:
            print(f"rerun recording written to {live.save} ({live.node.messages} messages; "
                  f"the bridge thread used {live.thread_cpu_s:.1f} s of CPU)")
        if live.server is not None and not interrupted:
            print(f"serving {live.url} until Ctrl-C", flush=True)
            live.serve_until_interrupted()
        live.stop_server()
    return 130 if interrupted else 0
