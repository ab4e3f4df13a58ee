"""Configuration dataclasses for the simulated pick-and-place world.

One config per component: `CameraConfig` for a camera, `SimConfig` for the
world (rates, physics step, episode limit, layout, cameras). Every config validates itself
in `__post_init__` and quotes the offending values in its errors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

COLOURS: tuple[str, ...] = ("red", "green", "blue", "yellow", "purple", "orange")
"""The six block colours, in a fixed order (docs/architecture.md, "The task")."""

CAMERA_MOUNTS = ("fixed", "link")


@dataclass(frozen=True)
class CameraConfig:
    """A pinhole camera rendered by PyBullet's TinyRenderer.

    mount="fixed": `eye`, `target`, `up` are world coordinates (m).
    mount="link":  `link` names a robot link; `eye` is the camera position in that link's
                   frame, `look` the viewing direction and `up` the image-up direction, both
                   in the link frame (`target` is ignored).
    `fov_deg` is the VERTICAL field of view, as in pybullet.computeProjectionMatrixFOV.
    Images are (height, width, 3) uint8 RGB.
    """

    name: str
    mount: str = "fixed"
    eye: tuple[float, float, float] = (1.0, 0.0, 0.6)
    target: tuple[float, float, float] = (0.45, 0.0, 0.0)
    up: tuple[float, float, float] = (0.0, 0.0, 1.0)
    link: str = ""
    look: tuple[float, float, float] = (0.0, 0.0, 1.0)
    fov_deg: float = 60.0
    width: int = 96
    height: int = 96
    near: float = 0.01
    far: float = 3.0

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"camera name={self.name!r} must be a non-empty identifier")
        if self.mount not in CAMERA_MOUNTS:
            raise ValueError(f"camera {self.name!r}: mount={self.mount!r} must be one of {CAMERA_MOUNTS}")
        if self.mount == "link" and not self.link:
            raise ValueError(f"camera {self.name!r}: mount='link' needs a link name, got link={self.link!r}")
        for label, vec in (("eye", self.eye), ("target", self.target), ("up", self.up), ("look", self.look)):
            if len(vec) != 3 or not all(math.isfinite(v) for v in vec):
                raise ValueError(f"camera {self.name!r}: {label}={vec!r} must be 3 finite numbers")
        if math.hypot(*self.up) == 0.0:
            raise ValueError(f"camera {self.name!r}: up={self.up!r} must be non-zero")
        if self.mount == "link" and math.hypot(*self.look) == 0.0:
            raise ValueError(f"camera {self.name!r}: look={self.look!r} must be non-zero")
        if self.mount == "fixed" and self.eye == self.target:
            raise ValueError(f"camera {self.name!r}: eye={self.eye!r} equals target")
        if not 1.0 <= self.fov_deg <= 170.0:
            raise ValueError(f"camera {self.name!r}: fov_deg={self.fov_deg} must be in [1, 170]")
        if self.width < 8 or self.height < 8:
            raise ValueError(f"camera {self.name!r}: size {self.width}x{self.height} must be >= 8x8")
        if not 0.0 < self.near < self.far:
            raise ValueError(f"camera {self.name!r}: need 0 < near={self.near} < far={self.far}")


def default_cameras() -> tuple[CameraConfig, ...]:
    """`front`: fixed overview of the table, blocks and box; `wrist`: on panda_hand.

    Poses were tuned by looking at 96x96 renders (see benchmarks/sim_figures.py --save).
    The wrist camera sits beside the fingers (hand -x side, so the fingers, which open along
    the hand y axis, do not block it) and looks along the gripper, tilted towards the point
    between the fingertips, so the block under the gripper is centred in the image.
    """
    return (
        CameraConfig(
            name="front", mount="fixed", eye=(1.18, -0.05, 0.78), target=(0.45, -0.05, 0.02),
            up=(0.0, 0.0, 1.0), fov_deg=46.0,
        ),
        CameraConfig(
            name="wrist", mount="link", link="panda_hand", eye=(0.07, 0.0, 0.03),
            look=(-0.35, 0.0, 1.0), up=(1.0, 0.0, 0.0), fov_deg=75.0,
        ),
    )


@dataclass(frozen=True)
class SimConfig:
    """World and episode parameters.

    Rates: a control period is 1/control_rate_hz s and is simulated by `physics_substeps`
    equal physics steps, the whole number nearest physics_rate_hz/control_rate_hz (default
    500/50 = 10, dt = 1/500 s: a held block slipped 0.1 mm while carried, measured, against
    0.3 mm at 1/250 s; and 500 Hz splits into whole steps at both the 50 Hz control rate and
    sim_node's 100 Hz joint-state rate, so both step with the same physics dt). A camera frame is due every
    control_rate_hz/camera_rate_hz ticks, starting at tick 0.
    """

    control_rate_hz: int = 50
    camera_rate_hz: int = 10
    physics_rate_hz: float = 500.0
    solver_iterations: int = 50
    episode_time_limit: float = 20.0
    n_blocks_range: tuple[int, int] = (2, 6)
    block_size: float = 0.04
    block_mass: float = 0.1
    min_block_spacing: float = 0.10
    # Block centres are sampled in this table region (x_min, x_max, y_min, y_max), metres in
    # the robot base frame (= world frame; the table top is z=0). Keeps blocks within the
    # Panda's comfortable top-down reach and clear of the box.
    block_region: tuple[float, float, float, float] = (0.33, 0.63, -0.09, 0.25)
    box_center: tuple[float, float] = (0.50, -0.27)
    box_inner_size: float = 0.16
    box_wall_height: float = 0.06
    initial_joint_noise: float = 0.0
    render_collision_meshes: bool = True
    cameras: tuple[CameraConfig, ...] = field(default_factory=default_cameras)

    def __post_init__(self) -> None:
        if self.control_rate_hz < 1:
            raise ValueError(f"control_rate_hz={self.control_rate_hz} must be >= 1")
        if self.camera_rate_hz < 1 or self.control_rate_hz % self.camera_rate_hz:
            raise ValueError(
                f"camera_rate_hz={self.camera_rate_hz} must be >= 1 and divide "
                f"control_rate_hz={self.control_rate_hz}")
        if not 50.0 <= self.physics_rate_hz <= 5000.0:
            raise ValueError(f"physics_rate_hz={self.physics_rate_hz} must be in [50, 5000]")
        if self.solver_iterations < 1:
            raise ValueError(f"solver_iterations={self.solver_iterations} must be >= 1")
        if not self.episode_time_limit > 0:
            raise ValueError(f"episode_time_limit={self.episode_time_limit} must be > 0")
        lo, hi = self.n_blocks_range
        if not 1 <= lo <= hi <= len(COLOURS):
            raise ValueError(f"n_blocks_range={self.n_blocks_range} must satisfy 1 <= lo <= hi <= {len(COLOURS)}")
        if not 0.01 <= self.block_size <= 0.07:
            raise ValueError(f"block_size={self.block_size} must be in [0.01, 0.07] m (gripper opens 0.08 m)")
        if self.block_mass <= 0:
            raise ValueError(f"block_mass={self.block_mass} must be > 0")
        if self.min_block_spacing < self.block_size * math.sqrt(2):
            raise ValueError(
                f"min_block_spacing={self.min_block_spacing} must be >= block diagonal "
                f"{self.block_size * math.sqrt(2):.3f}")
        x0, x1, y0, y1 = self.block_region
        if not (x0 < x1 and y0 < y1):
            raise ValueError(f"block_region={self.block_region} must be (x_min < x_max, y_min < y_max)")
        if self.box_inner_size <= self.block_size:
            raise ValueError(f"box_inner_size={self.box_inner_size} must exceed block_size={self.block_size}")
        if self.box_wall_height <= self.block_size:
            raise ValueError(f"box_wall_height={self.box_wall_height} must exceed block_size={self.block_size}")
        if self.initial_joint_noise < 0:
            raise ValueError(f"initial_joint_noise={self.initial_joint_noise} must be >= 0")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names {names} must be unique")

    @property
    def control_dt(self) -> float:
        """Seconds per control tick."""
        return 1.0 / self.control_rate_hz

    @property
    def physics_substeps(self) -> int:
        """Physics steps per control tick."""
        return max(1, round(self.physics_rate_hz / self.control_rate_hz))

    @property
    def physics_dt(self) -> float:
        """Seconds per physics step (divides the control period exactly)."""
        return 1.0 / (self.control_rate_hz * self.physics_substeps)

    @property
    def camera_every(self) -> int:
        """A camera frame is due on ticks where tick % camera_every == 0."""
        return self.control_rate_hz // self.camera_rate_hz

    def camera(self, name: str) -> CameraConfig:
        """The camera config called `name` (KeyError listing the known names otherwise)."""
        for cam in self.cameras:
            if cam.name == name:
                return cam
        raise KeyError(f"no camera {name!r}; cameras are {[c.name for c in self.cameras]}")
