"""Where each thing lives in a Rerun recording (entity paths) and the first layout (blueprint).

One timeline, `sim_time` (a duration in sim seconds, the /clock the nodes run on): a message
is placed at the sim time it was published (live) or recorded (bags), so cameras, 3D and
plots move together under one cursor, live and in replays.

Entity paths, and which message puts one row on each:

| entity | archetype | one row per |
|---|---|---|
| cameras/<camera>/image | Image | camera/<camera>/image_raw |
| cameras/<camera>/attention | Image (RGBA heat map over the patches) | policy/attention |
| words/<camera>/attention | Image (the words' heat map, over the camera) | policy/instruction_attention |
| episode/instruction | TextDocument | task |
| episode/state, episode/status | StateChange, TextDocument | episode |
| joints/<joint>/actual | Scalars | joint_states (panda_joint1..7) |
| joints/<joint>/command | Scalars | arm_controller/commands |
| gripper/actual, gripper/command | Scalars (finger opening, mm) | joint_states, gripper_controller/commands |
| world/robot/<link> | Transform3D (mesh: world/robot/<link>/mesh, static) | joint_states |
| world/ee/actual | Points3D: the grasp point | joint_states |
| world/ee/path | LineStrips3D: the path taken since the episode began | camera/<first camera>/image_raw |
| world/chunk/path | LineStrips3D: the predicted chunk through forward kinematics | policy/action_chunk |
| world/target_guess | Points3D: the target head's guess of the named block | policy/diagnostics with target_xyz_m |
| world/objects/blocks, world/objects/box | Boxes3D | objects (live: at most 10 per sim second) |
| diagnostics/<key> | Scalars | policy/diagnostics |

Replays log every message of a bag (tests/test_view.py counts them); live, the bridge drops
what it cannot keep up with (arm_act.view.live).
"""
from __future__ import annotations

import rerun.blueprint as rrb

APPLICATION_ID = "arm_act"
TIMELINE = "sim_time"
CAMERAS = ("front", "wrist")
DIAGNOSTIC_KEYS = ("inference_ms", "observation_age_ms", "deadline_misses", "ticks_without_fresh_chunk")


def camera_image(camera: str) -> str:
    return f"cameras/{camera}/image"


def camera_attention(camera: str) -> str:
    return f"cameras/{camera}/attention"


def words_attention(camera: str) -> str:
    return f"words/{camera}/attention"


def joint_actual(joint: str) -> str:
    return f"joints/{joint}/actual"


def joint_command(joint: str) -> str:
    return f"joints/{joint}/command"


def robot_link(link: str) -> str:
    return f"world/robot/{link}"


def diagnostic(key: str) -> str:
    return f"diagnostics/{key}"


INSTRUCTION = "episode/instruction"
EPISODE_STATE = "episode/state"
EPISODE_STATUS = "episode/status"
GRIPPER_ACTUAL = "gripper/actual"
GRIPPER_COMMAND = "gripper/command"
EE_ACTUAL = "world/ee/actual"
EE_PATH = "world/ee/path"
CHUNK_PATH = "world/chunk/path"
TARGET_GUESS = "world/target_guess"
BLOCKS = "world/objects/blocks"
BOX = "world/objects/box"
TABLE = "world/table"


ATTENTION_TABS = ("queries", "words")
"""The camera column's tabs: the action queries' attention, the instruction words' attention."""


def blueprint(cameras=CAMERAS, attention: str = "queries") -> rrb.Blueprint:
    """Cameras with attention and the episode on the left, the 3D scene with the diagnostics
    below it in the middle, the joints (actual vs commanded) and gripper on the right.
    attention: the camera tab shown first (ATTENTION_TABS)."""
    if attention not in ATTENTION_TABS:
        raise ValueError(f"attention tab {attention!r} is not one of {', '.join(ATTENTION_TABS)}")
    # Imported here, not at the top: the sim imports PyBullet, which prints a banner, and
    # `arm-act view` checks its bags before anything prints.
    from arm_act.sim.robot import ARM_JOINTS

    cameras_views = rrb.Tabs(
        rrb.Vertical(*[rrb.Spatial2DView(origin=f"cameras/{c}", name=f"{c} camera, attention") for c in cameras],
                     name="action queries' attention"),
        rrb.Vertical(*[rrb.Spatial2DView(origin="/", contents=[f"/{camera_image(c)}", f"/{words_attention(c)}"],
                                         name=f"{c} camera, the words' attention") for c in cameras],
                     name="instruction's attention"),
        active_tab=ATTENTION_TABS.index(attention),
    )
    left = rrb.Vertical(
        cameras_views,
        rrb.TextDocumentView(origin=INSTRUCTION, name="instruction"),
        rrb.StateTimelineView(origin=EPISODE_STATE, name="episode state"),
        rrb.TextDocumentView(origin=EPISODE_STATUS, name="episode"),
        row_shares=[3 * len(cameras), 0.6, 1, 1.2],
    )
    scene = rrb.Spatial3DView(
        origin="world", name="arm, objects, predicted chunk (magenta), path taken (blue), target guess (cyan)",
        eye_controls=rrb.EyeControls3D(position=(1.45, -1.1, 0.95), look_target=(0.45, 0.0, 0.1),
                                       eye_up=(0.0, 0.0, 1.0)),
        line_grid=False)
    middle = rrb.Vertical(scene, rrb.TimeSeriesView(origin="diagnostics", name="policy diagnostics"),
                          row_shares=[3, 1])
    right = rrb.Vertical(
        rrb.Grid(*[rrb.TimeSeriesView(origin=f"joints/{j}", name=f"joint {j[-1]} (rad): actual, command")
                   for j in ARM_JOINTS],
                 rrb.TimeSeriesView(origin="gripper", name="gripper opening (mm)"), grid_columns=2),
    )
    return rrb.Blueprint(
        rrb.Horizontal(left, middle, right, column_shares=[1.0, 1.7, 1.4]),
        rrb.BlueprintPanel(state="collapsed"), rrb.SelectionPanel(state="collapsed"),
        rrb.TimePanel(state="collapsed", timeline=TIMELINE, play_state="following"),  # live: the newest data
    )
