"""The pictures in README.md and docs/architecture.md, made from the code in this repository.

    python docs/make_figures.py architecture            # docs/architecture.png (matplotlib)
    python docs/make_figures.py demo                    # docs/demo.png from a fresh live run
    python docs/make_figures.py demo --video FILE.mp4 --frame 16
    python docs/make_figures.py tasks                   # docs/tasks.png (matplotlib)
    python docs/make_figures.py words --checkpoint CKPT # docs/instruction_attention.png

`architecture` draws the data flow between the nodes and the offline pipeline. `demo` runs
one live episode of the shipped policy over ROS 2 (`arm-act demo --episodes 1 --seed 100000
--video FILE.mp4`: sim_node and policy_node in real time, the frames `make run` shows)
unless --video names an existing video, and writes one mid-episode frame: both cameras with
the policy's cross-attention over the patches, the instruction, the gripper, and the joint
strip (actual against commanded). Real time is not deterministic, so a fresh run gives a
frame close to, not equal to, the committed one. `tasks` draws the success zones of the
relation and stack goals (docs/tasks.md), sampled from sim.task's own rules, on the table as
the front camera sees it. `words` renders one layout and, for several instructions about it,
where the instruction's words look in each camera: the encoder self-attention of the
instruction tokens over the patches, averaged over layers, heads and words, drawn from its
minimum over each image as the Rerun view draws `policy/instruction_attention`.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent

# Colours of the three kinds of box: ROS nodes, files on disk, arm-act commands.
NODE, FILE, COMMAND = "#dbe9f6", "#f6ecd6", "#e3f1dd"


def architecture(out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    fig, ax = plt.subplots(figsize=(13, 7.6), dpi=110)
    ax.set_xlim(0, 13.1)
    ax.set_ylim(0, 7.6)
    ax.axis("off")

    def box(x, y, w, h, title, lines=(), colour=NODE, size=12):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.04,rounding_size=0.12",
                                    facecolor=colour, edgecolor="#333333", linewidth=1.2))
        if not lines:
            ax.text(x + w / 2, y + h / 2, title, ha="center", va="center", fontsize=size, weight="bold")
            return
        ax.text(x + w / 2, y + h - 0.22, title, ha="center", va="top", fontsize=size, weight="bold")
        for i, line in enumerate(lines):
            ax.text(x + 0.15, y + h - 0.62 - 0.3 * i, line, ha="left", va="top", fontsize=9.5)

    def arrow(x0, y0, x1, y1, label="", dy=0.08, colour="#333333"):
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                    arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.4, shrinkA=2, shrinkB=2))
        if label:
            ax.text((x0 + x1) / 2, (y0 + y1) / 2 + dy, label, ha="center", va="bottom", fontsize=9.5,
                    color=colour, linespacing=1.3)

    ax.text(0.1, 7.45, "Live loop over ROS 2 topics (DDS)", fontsize=13, weight="bold", va="top")
    box(0.2, 3.5, 3.3, 3.5, "sim_node", [
        "PyBullet world (ArmEnv):",
        "  Panda, table, box, 2-6 blocks",
        "physics thread 'sim_loop':",
        "  step, render both cameras",
        "  realtime: paced to the clock",
        "  lockstep: waits for each",
        "  tick's command",
        "~/reset  ~/pause  ~/unpause",
    ])
    box(8.3, 3.5, 4.5, 3.5, "policy_node", [
        "executor thread (single-threaded):",
        "  callbacks keep the latest observation",
        "  control tick on /clock, 50 Hz: reads",
        "  the chunk executor (ensembling)",
        "worker thread 'inference', per pair:",
        "  patch tokens + state + instruction",
        "  -> encoder -> 50 action queries",
        "  cross-attend -> chunk (50 x 8)",
        "~/enable  ~/disable",
    ])
    red = "#a23b2a"
    arrow(3.5, 6.45, 8.3, 6.45, "/clock, joint_states (100 Hz)")
    arrow(3.5, 5.65, 8.3, 5.65, "camera/{front,wrist}/image_raw\n+ camera_info (10 Hz)")
    arrow(3.5, 4.95, 8.3, 4.95, "task, episode (transient local), objects")
    arrow(8.3, 4.0, 3.5, 4.0, "arm_controller/commands (7 joints)\ngripper_controller/commands (1)", colour=red)
    ax.text(5.9, 3.92, "50 Hz, one per control tick", ha="center", va="top", fontsize=9.5, color=red)

    box(0.2, 1.6, 3.3, 1.3, "bag_recorder", ["every live topic -> rosbag2", "MCAP, sim-time stamps"])
    box(4.3, 1.6, 3.2, 1.3, "viewer (arm-act demo)", ["cameras + attention", "-> window or .mp4"])
    box(8.3, 1.6, 4.5, 1.3, "policy_node also publishes", [
        "policy/action_chunk, policy/attention,",
        "policy/diagnostics",
    ])
    arrow(1.85, 3.5, 1.85, 2.9)
    arrow(3.2, 3.5, 4.9, 2.9)
    arrow(10.55, 3.5, 10.55, 2.9)
    arrow(8.3, 2.25, 7.5, 2.25)

    ax.text(0.1, 1.3, "Offline: data -> training -> evaluation (arm-act commands)", fontsize=13, weight="bold",
            va="top")
    y, h = 0.1, 0.8
    steps = [("arm-act collect", COMMAND), ("bags (MCAP)", FILE), ("arm-act train", COMMAND),
             ("checkpoint dir", FILE), ("arm-act eval, demo", COMMAND)]
    x, w, gap = 0.2, 2.2, 0.45
    for i, (label, colour) in enumerate(steps):
        box(x, y, w, h, label, (), colour, size=10.5)
        if i < len(steps) - 1:
            arrow(x + w, y + h / 2, x + w + gap, y + h / 2)
        x += w + gap

    fig.savefig(out, bbox_inches="tight", facecolor="white")
    plt.close(fig)
    print(f"wrote {out}")


def demo(out: Path, video: Path | None, frame: int) -> None:
    if video is not None:
        write_frame(out, video, frame)
        return
    with tempfile.TemporaryDirectory(prefix="arm_act_demo_") as tmp:
        arm_act = Path(sys.executable).with_name("arm-act")
        video = Path(tmp) / "demo.mp4"
        subprocess.run([str(arm_act), "demo", "--episodes", "1", "--seed", "100000", "--video", str(video)],
                       check=True, timeout=300)
        write_frame(out, video, frame)


def write_frame(out: Path, video: Path, frame: int) -> None:
    import cv2

    capture = cv2.VideoCapture(str(video))
    frames = []
    while True:
        ok, image = capture.read()
        if not ok:
            break
        frames.append(image)
    capture.release()
    if not frames:
        raise SystemExit(f"{video}: no frames")
    index = min(frame, len(frames) - 1)
    cv2.imwrite(str(out), frames[index])
    print(f"wrote {out} (frame {index} of {len(frames)} from {video})")


def tasks(out: Path) -> None:
    """The table seen from above, turned as the front camera sees it (world +y to the right,
    world +x, nearer the camera, down), with the relation zones and the stack tolerance
    around one reference block, from in_relation_zone and STACK_XY_TOLERANCE themselves."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.patches import Circle, Rectangle

    sys.path.insert(0, str(ROOT))
    from arm_act.sim import SimConfig
    from arm_act.sim.task import BOX_WALL, RELATION_DIRECTIONS, STACK_XY_TOLERANCE, in_relation_zone

    cfg = SimConfig()
    ref = np.array([0.48, 0.10])
    colours = {"left": "#4c72b0", "right": "#dd8452", "front": "#55a868", "behind": "#c44e52"}
    fig, ax = plt.subplots(figsize=(6.4, 5.6))
    ys, xs = np.meshgrid(np.linspace(-0.45, 0.35, 321), np.linspace(0.25, 0.75, 201))
    for relation, colour in colours.items():
        inside = np.array([[in_relation_zone((x, y), ref, relation) for x, y in zip(rx, ry, strict=True)]
                           for rx, ry in zip(xs, ys, strict=True)])
        ax.contourf(ys, xs, inside.astype(float), levels=[0.5, 1.5], colors=[colour], alpha=0.35)
        d = np.asarray(RELATION_DIRECTIONS[relation])
        label = {"front": "in front of", "behind": "behind"}.get(relation, f"{relation} of")
        ax.text(ref[1] + 0.085 * d[1], ref[0] + 0.085 * d[0], label, ha="center", va="center", fontsize=9)
    s = cfg.block_size
    ax.add_patch(Rectangle((ref[1] - s / 2, ref[0] - s / 2), s, s, color="#555555"))
    ax.add_patch(Circle((ref[1], ref[0]), STACK_XY_TOLERANCE * s, fill=False, ls="--", color="white", lw=1.2))
    ax.text(-0.43, 0.73, "grey: the reference block; white dashes: where the stacked block's centre must be",
            ha="left", va="bottom", fontsize=8)
    x0, x1, y0, y1 = cfg.block_region
    ax.add_patch(Rectangle((y0, x0), y1 - y0, x1 - x0, fill=False, ls=":", color="black"))
    ax.text(y1 - 0.005, x0 + 0.005, "block region", ha="right", va="bottom", fontsize=8)
    bx, by = cfg.box_center
    outer = cfg.box_inner_size + 2 * BOX_WALL
    ax.add_patch(Rectangle((by - outer / 2, bx - outer / 2), outer, outer, color="#8b5a2b", alpha=0.6))
    ax.text(by, bx, "box", ha="center", va="center", color="white")
    ax.set_xlim(-0.45, 0.35)
    ax.set_ylim(0.75, 0.25)  # +x (towards the camera) down, as in the front image
    ax.set_aspect("equal")
    ax.set_xlabel("world y (m): image left <-> right")
    ax.set_ylabel("world x (m): far from camera (top) / near (bottom)")
    ax.set_title("Relation zones (4-12 cm, 45 deg each side) as the front camera sees the table", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def words(out: Path, checkpoint: Path | None, seed: int, blocks: int, instructions: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sys.path.insert(0, str(ROOT))
    from arm_act.common.paths import default_checkpoint
    from arm_act.common.viz import attention_overlay
    from arm_act.policy.runtime import PolicyRuntime
    from arm_act.sim import ArmEnv

    runtime = PolicyRuntime.from_checkpoint(checkpoint or default_checkpoint())
    with ArmEnv() as env:
        env.reset(seed, blocks)
        images, position = env.render(), env.joint_state().position
        on_table = sorted({o.colour for o in env.objects() if o.kind == "block"})
    cameras = list(runtime.config.cameras)
    fig, axes = plt.subplots(len(instructions), len(cameras), figsize=(2.6 * len(cameras), 2.75 * len(instructions)),
                             squeeze=False)
    for row, text in enumerate(instructions):
        grids = runtime.predict_chunk(images, position, text, need_attention=True).instruction_attention
        for col, camera in enumerate(cameras):
            grid = grids[camera]
            ax = axes[row][col]
            ax.imshow(attention_overlay(images[camera], grid - grid.min()))
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(f"{camera} camera", fontsize=9)
            if col == 0:
                ax.set_ylabel(text.replace(" block ", " block\n", 1), fontsize=8)
    fig.suptitle(f"Where the instruction's words look\n(seed {seed}; blocks {', '.join(on_table)})", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="figure", required=True)
    a = sub.add_parser("architecture")
    a.add_argument("--out", type=Path, default=DOCS / "architecture.png")
    d = sub.add_parser("demo")
    d.add_argument("--out", type=Path, default=DOCS / "demo.png")
    d.add_argument("--video", type=Path, help="an existing live-view video (default: run one live episode)")
    d.add_argument("--frame", type=int, default=16, help="frame index (one per camera pair, 10 per second)")
    t = sub.add_parser("tasks")
    t.add_argument("--out", type=Path, default=DOCS / "tasks.png")
    w = sub.add_parser("words")
    w.add_argument("--out", type=Path, default=DOCS / "instruction_attention.png")
    w.add_argument("--checkpoint", type=Path, help="default: the shipped checkpoint")
    w.add_argument("--seed", type=int, default=100003)
    w.add_argument("--blocks", type=int, default=4)
    w.add_argument("--instruction", action="append", dest="instructions", metavar="TEXT",
                   help="repeat for several rows (default: three box instructions)")
    args = parser.parse_args(argv)
    if args.figure == "architecture":
        architecture(args.out)
    elif args.figure == "tasks":
        tasks(args.out)
    elif args.figure == "words":
        words(args.out, args.checkpoint, args.seed, args.blocks, args.instructions or [
            "put the red block in the box", "put the green block in the box", "put the yellow block in the box"])
    else:
        demo(args.out, args.video, args.frame)
    return 0


if __name__ == "__main__":
    sys.exit(main())
