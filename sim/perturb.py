"""Robustness perturbations: seeded changes of the world that training never saw.

Each perturbation is a frozen, validated config dataclass (`Push`, `Lighting`,
`CameraJitter`, `Distractors`, `BlockSize`, `Crowded`); `perturbation(name)` gives the
default of one by name (ROBUSTNESS lists them). `ArmEnv(config, perturbation=p)` applies it:

    push         the named block is displaced 3-6 cm (teleported, yaw kept) once, at a random
                 moment before the grasp: the first tick at which the grasp point comes within
                 a random 4-12 cm of the block while the gripper is open
    lighting     light direction, colour, ambient/diffuse/specular coefficients per episode
                 (TinyRenderer, shadows still off)
    camera       the front camera's eye moved up to 2 cm and its view rotated up to 3 deg
    distractors  1-3 cylinders or spheres of random colours (never within RGB distance 0.15 of
                 a block colour) on the table; they are not blocks: objects() and the success
                 rule ignore them
    size         every block's edge scaled by one factor in 0.8-1.2
    crowded      7-8 blocks: the episode's blocks, the unused colours, then copies of colours
                 other than the named one (the named colour stays unique)

One seed rule: everything is drawn at reset from `world_perturbation_rng(seed)`, a generator
of its own, so the layout (colours, positions, yaws, named block) drawn from the episode seed
is the same as without the perturbation, and a perturbed episode depends on its seed only.
Without a perturbation nothing here runs and every episode is bit-identical to before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

WORLD_PERTURBATION_STREAM = 31
"""Second word of the seed of world_perturbation_rng (the block count uses 7, arm_act.common.episodes)."""

BLOCK_RGB = {  # the six block colours (sim.task.RGBA), repeated here so this module stays light
    "red": (0.85, 0.08, 0.08), "green": (0.10, 0.70, 0.15), "blue": (0.10, 0.25, 0.95),
    "yellow": (0.95, 0.88, 0.10), "purple": (0.55, 0.12, 0.78), "orange": (1.00, 0.50, 0.00),
}


def world_perturbation_rng(episode_seed: int, part: str = "") -> np.random.Generator:
    """The generator the perturbation of the episode with this seed is drawn from; `part`
    names a second stream of the same episode (the crowded world's extra blocks)."""
    words = [int(episode_seed), WORLD_PERTURBATION_STREAM]
    if part:
        words.append(int.from_bytes(part.encode()[:8], "little"))
    return np.random.default_rng(words)


def _check_range(owner: str, label: str, value: tuple[float, float], low: float, high: float) -> None:
    lo, hi = value
    if not (math.isfinite(lo) and math.isfinite(hi) and low <= lo <= hi <= high):
        raise ValueError(f"{owner}: {label}={value!r} must satisfy {low} <= lo <= hi <= {high}")


@dataclass(frozen=True)
class Push:
    """Displace the named block by `distance` (m) in a random direction once, when the grasp
    point first comes within `trigger_distance` (m, drawn per episode) of it with the gripper
    open. The new place stays in the block region (grown by `margin`), at least
    `clearance` from the other blocks' centres and, while the fingertips are below the block's
    top + 1.5 cm, `finger_clearance` (horizontally) from the grasp point, so the block never
    lands in the fingers or on another block."""

    name = "push"
    distance: tuple[float, float] = (0.03, 0.06)
    trigger_distance: tuple[float, float] = (0.04, 0.12)
    margin: float = 0.03
    clearance: float = 0.07
    finger_clearance: float = 0.06
    check_rate_hz: int = 50
    """How often the trigger is checked: at this rate whatever the env's step rate (sim_node
    steps at its joint-state rate), so a push happens at the same sim time in process and
    over ROS."""

    def __post_init__(self) -> None:
        if self.check_rate_hz < 1:
            raise ValueError(f"Push: check_rate_hz={self.check_rate_hz} must be >= 1")
        _check_range("Push", "distance", self.distance, 0.0, 0.2)
        _check_range("Push", "trigger_distance", self.trigger_distance, 0.0, 0.5)
        for label in ("margin", "clearance", "finger_clearance"):
            if not 0.0 <= getattr(self, label) <= 0.2:
                raise ValueError(f"Push: {label}={getattr(self, label)} must be in [0, 0.2] m")


@dataclass(frozen=True)
class Lighting:
    """Per episode: a light direction with elevation in `elevation_deg` and any azimuth, an RGB
    colour each channel in `colour`, and ambient / diffuse / specular coefficients."""

    name = "lighting"
    elevation_deg: tuple[float, float] = (20.0, 85.0)
    colour: tuple[float, float] = (0.6, 1.0)
    ambient: tuple[float, float] = (0.3, 0.8)
    diffuse: tuple[float, float] = (0.2, 0.8)
    specular: tuple[float, float] = (0.0, 0.4)

    def __post_init__(self) -> None:
        _check_range("Lighting", "elevation_deg", self.elevation_deg, 0.0, 90.0)
        for label in ("colour", "ambient", "diffuse", "specular"):
            _check_range("Lighting", label, getattr(self, label), 0.0, 1.0)


@dataclass(frozen=True)
class CameraJitter:
    """Move camera `camera` (a fixed one) by up to `max_offset` m (uniform in a ball) and
    rotate its view by up to `max_angle_deg` about a random axis, per episode."""

    name = "camera"
    camera: str = "front"
    max_offset: float = 0.02
    max_angle_deg: float = 3.0

    def __post_init__(self) -> None:
        if not self.camera:
            raise ValueError("CameraJitter: camera must name a camera")
        if not 0.0 <= self.max_offset <= 0.2:
            raise ValueError(f"CameraJitter: max_offset={self.max_offset} must be in [0, 0.2] m")
        if not 0.0 <= self.max_angle_deg <= 30.0:
            raise ValueError(f"CameraJitter: max_angle_deg={self.max_angle_deg} must be in [0, 30]")


@dataclass(frozen=True)
class Distractors:
    """`count` objects, each a cylinder or a sphere (`shapes`), radius in `radius` m, a
    cylinder's height in `height` m, a random colour at least `min_colour_distance` (RGB,
    0-1 scale) from every block colour, placed in the block region at least `clearance` m
    from block centres and from each other."""

    name = "distractors"
    count: tuple[int, int] = (1, 3)
    shapes: tuple[str, ...] = ("cylinder", "sphere")
    radius: tuple[float, float] = (0.015, 0.025)
    height: tuple[float, float] = (0.03, 0.06)
    min_colour_distance: float = 0.15
    clearance: float = 0.08
    mass: float = 0.1

    def __post_init__(self) -> None:
        lo, hi = self.count
        if not 1 <= lo <= hi <= 6:
            raise ValueError(f"Distractors: count={self.count!r} must satisfy 1 <= lo <= hi <= 6")
        if not self.shapes or any(s not in ("cylinder", "sphere") for s in self.shapes):
            raise ValueError(f"Distractors: shapes={self.shapes!r} must be 'cylinder' and/or 'sphere'")
        _check_range("Distractors", "radius", self.radius, 0.005, 0.05)
        _check_range("Distractors", "height", self.height, 0.01, 0.1)
        if not 0.0 <= self.min_colour_distance <= 0.5:
            raise ValueError(f"Distractors: min_colour_distance={self.min_colour_distance} must be in [0, 0.5]")
        if not 0.0 < self.clearance <= 0.2:
            raise ValueError(f"Distractors: clearance={self.clearance} must be in (0, 0.2] m")
        if self.mass <= 0:
            raise ValueError(f"Distractors: mass={self.mass} must be > 0")


@dataclass(frozen=True)
class BlockSize:
    """Scale every block's edge by one factor drawn from `scale` per episode."""

    name = "size"
    scale: tuple[float, float] = (0.8, 1.2)

    def __post_init__(self) -> None:
        _check_range("BlockSize", "scale", self.scale, 0.5, 1.5)


@dataclass(frozen=True)
class Crowded:
    """`total` blocks (drawn per episode) instead of the episode's count."""

    name = "crowded"
    total: tuple[int, int] = (7, 8)

    def __post_init__(self) -> None:
        lo, hi = self.total
        if not 2 <= lo <= hi <= 12:
            raise ValueError(f"Crowded: total={self.total!r} must satisfy 2 <= lo <= hi <= 12")


Perturbation = Push | Lighting | CameraJitter | Distractors | BlockSize | Crowded
PERTURBATIONS: dict[str, type] = {c.name: c for c in (Push, Lighting, CameraJitter, Distractors, BlockSize, Crowded)}
ROBUSTNESS: tuple[str, ...] = tuple(PERTURBATIONS)


def perturbation(name: str) -> Perturbation:
    """The default perturbation called `name` (one of ROBUSTNESS)."""
    if name not in PERTURBATIONS:
        raise ValueError(f"robustness={name!r} must be one of {list(ROBUSTNESS)}")
    return PERTURBATIONS[name]()


# --- what one episode gets (drawn at reset) -----------------------------------------------
@dataclass(frozen=True)
class DistractorSpec:
    shape: str
    radius: float
    height: float
    rgb: tuple[float, float, float]
    candidates: tuple[tuple[float, float], ...]
    """Places (x, y) in order; the env takes the first clear of the blocks and earlier distractors."""


@dataclass(frozen=True)
class EpisodePerturbation:
    """The values drawn for one episode; only the fields of its kind are set."""

    kind: str
    light: dict = field(default_factory=dict)  # getCameraImage light keyword arguments
    camera_offset: tuple[float, float, float] | None = None
    camera_rotation: tuple[tuple[float, ...], ...] | None = None  # (3, 3) row-major
    camera_angle_deg: float = 0.0
    block_scale: float = 1.0
    total_blocks: int = 0
    push_trigger: float = 0.0
    push_distance: float = 0.0
    push_angles: tuple[float, ...] = ()
    distractors: tuple[DistractorSpec, ...] = ()

    def describe(self) -> dict:
        """JSON-ready values for an episode record."""
        out: dict = {"kind": self.kind}
        if self.kind == "lighting":
            out["light"] = {k: ([round(float(x), 4) for x in v] if isinstance(v, (list, tuple)) else
                                round(float(v), 4)) for k, v in self.light.items()}
        elif self.kind == "camera":
            out["camera_offset_cm"] = [round(100 * v, 3) for v in self.camera_offset or ()]
            out["camera_angle_deg"] = round(self.camera_angle_deg, 3)
        elif self.kind == "size":
            out["block_scale"] = round(self.block_scale, 4)
        elif self.kind == "crowded":
            out["total_blocks"] = self.total_blocks
        elif self.kind == "push":
            out["push_trigger_cm"] = round(100 * self.push_trigger, 2)
            out["push_distance_cm"] = round(100 * self.push_distance, 2)
        elif self.kind == "distractors":
            out["distractors"] = [{"shape": d.shape, "radius_cm": round(100 * d.radius, 2),
                                   "rgb": [round(c, 3) for c in d.rgb]} for d in self.distractors]
        return out


def _rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    """Rodrigues: rotation matrix (3, 3) by `angle` rad about unit `axis`."""
    x, y, z = axis
    k = np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * (k @ k)


def _unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.normal(size=3)
    return v / np.linalg.norm(v)


def distractor_colour(rng: np.random.Generator, min_distance: float) -> tuple[float, float, float]:
    """A random RGB at least min_distance from every block colour."""
    refs = np.array(list(BLOCK_RGB.values()))
    for _ in range(1000):
        rgb = rng.uniform(0.0, 1.0, size=3)
        if np.min(np.linalg.norm(refs - rgb, axis=1)) >= min_distance:
            return tuple(float(c) for c in rgb)
    raise RuntimeError(f"no colour {min_distance} away from the block colours")


def sample_episode(p: Perturbation, seed: int, block_region: tuple[float, float, float, float]
                   ) -> EpisodePerturbation:
    """Draw the values of perturbation `p` for the episode with this seed (positions that
    depend on the layout, the distractors' and the push's, are placed by the env)."""
    rng = world_perturbation_rng(seed)
    if isinstance(p, Lighting):
        elevation = math.radians(rng.uniform(*p.elevation_deg))
        azimuth = rng.uniform(-math.pi, math.pi)
        direction = [math.cos(elevation) * math.cos(azimuth), math.cos(elevation) * math.sin(azimuth),
                     math.sin(elevation)]
        light = {"lightDirection": direction, "lightColor": [float(c) for c in rng.uniform(*p.colour, size=3)],
                 "lightAmbientCoeff": float(rng.uniform(*p.ambient)),
                 "lightDiffuseCoeff": float(rng.uniform(*p.diffuse)),
                 "lightSpecularCoeff": float(rng.uniform(*p.specular))}
        return EpisodePerturbation(p.name, light=light)
    if isinstance(p, CameraJitter):
        offset = _unit(rng) * p.max_offset * rng.uniform() ** (1 / 3)  # uniform in the ball
        angle = rng.uniform(0.0, p.max_angle_deg)
        rot = _rotation(_unit(rng), math.radians(angle))
        return EpisodePerturbation(p.name, camera_offset=tuple(float(v) for v in offset),
                                   camera_rotation=tuple(tuple(float(v) for v in row) for row in rot),
                                   camera_angle_deg=float(angle))
    if isinstance(p, BlockSize):
        return EpisodePerturbation(p.name, block_scale=float(rng.uniform(*p.scale)))
    if isinstance(p, Crowded):
        return EpisodePerturbation(p.name, total_blocks=int(rng.integers(p.total[0], p.total[1] + 1)))
    if isinstance(p, Push):
        return EpisodePerturbation(p.name, push_trigger=float(rng.uniform(*p.trigger_distance)),
                                   push_distance=float(rng.uniform(*p.distance)),
                                   push_angles=tuple(float(a) for a in rng.uniform(-math.pi, math.pi, size=64)))
    if isinstance(p, Distractors):
        x0, x1, y0, y1 = block_region
        n = int(rng.integers(p.count[0], p.count[1] + 1))
        specs = []
        for _ in range(n):
            shape = str(p.shapes[int(rng.integers(len(p.shapes)))])
            radius = float(rng.uniform(*p.radius))
            height = float(rng.uniform(*p.height)) if shape == "cylinder" else 2 * radius
            rgb = distractor_colour(rng, p.min_colour_distance)
            xs, ys = rng.uniform(x0, x1, size=200), rng.uniform(y0, y1, size=200)
            candidates = tuple((float(x), float(y)) for x, y in zip(xs, ys, strict=True))
            specs.append(DistractorSpec(shape, radius, height, rgb, candidates))
        return EpisodePerturbation(p.name, distractors=tuple(specs))
    raise TypeError(f"not a perturbation: {p!r}")


def jitter_camera(eye, target, up, offset, rotation) -> tuple[tuple, tuple, tuple]:
    """eye moved by offset; the view direction and up rotated by rotation (3, 3)."""
    eye_a, target_a, up_a = (np.asarray(v, dtype=np.float64) for v in (eye, target, up))
    rot = np.asarray(rotation, dtype=np.float64)
    new_eye = eye_a + np.asarray(offset, dtype=np.float64)
    new_target = new_eye + rot @ (target_a - eye_a)
    return tuple(map(float, new_eye)), tuple(map(float, new_target)), tuple(map(float, rot @ up_a))


def push_destination(block_xy: np.ndarray, others_xy: list[np.ndarray], grasp_xy: np.ndarray | None,
                     drawn: EpisodePerturbation, p: Push, block_region) -> np.ndarray | None:
    """Where the push puts the block: the first drawn direction whose end point is in the
    (grown) region and clear of the other blocks and of the fingers (grasp_xy: the grasp
    point where the fingertips are low enough to touch the block, else None); None if no
    direction is."""
    x0, x1, y0, y1 = block_region
    m = p.margin
    for angle in drawn.push_angles:
        cand = block_xy + drawn.push_distance * np.array([math.cos(angle), math.sin(angle)])
        if not (x0 - m <= cand[0] <= x1 + m and y0 - m <= cand[1] <= y1 + m):
            continue
        if any(np.linalg.norm(cand - o) < p.clearance for o in others_xy):
            continue
        if grasp_xy is not None and np.linalg.norm(cand - grasp_xy) < p.finger_clearance:
            continue
        return cand
    return None


def crowd_extra(rng: np.random.Generator, colours: list[str], xy: np.ndarray, target: str, total: int,
                spacing: float, diagonal: float, block_region) -> list[tuple[str, str, np.ndarray, float]]:
    """The blocks that make a layout of `total`: (key, colour, xy (2,), yaw) each. Colours: the
    unused ones (shuffled) first, then copies of colours other than `target` (keys
    "<colour>_2", ...). Places: rejection-sampled at `spacing` from every block, the spacing
    shrunk by 10% steps (never below 1.2 x the block diagonal) when a block does not fit."""
    all_colours = list(BLOCK_RGB)
    unused = [c for c in all_colours if c not in colours]
    unused = [unused[i] for i in rng.permutation(len(unused))]
    others = [c for c in colours if c != target]
    extra_colours = unused[:max(0, total - len(colours))]
    if len(colours) + len(extra_colours) < total and not others:
        raise ValueError(f"crowding {colours} to {total} blocks would copy the named colour {target!r}")
    k = 0
    while len(colours) + len(extra_colours) < total:
        extra_colours.append(others[k % len(others)])
        k += 1
    placed = [np.asarray(p, dtype=np.float64) for p in xy]
    counts = {c: 1 for c in colours}
    out = []
    x0, x1, y0, y1 = block_region
    for colour in extra_colours:
        gap = spacing
        while True:
            for _ in range(2000):
                cand = np.array([rng.uniform(x0, x1), rng.uniform(y0, y1)])
                if all(np.linalg.norm(cand - q) >= gap for q in placed):
                    break
            else:
                if gap * 0.9 < 1.2 * diagonal:
                    raise RuntimeError(f"could not place {total} blocks in {block_region}")
                gap *= 0.9
                continue
            break
        placed.append(cand)
        counts[colour] = counts.get(colour, 0) + 1
        key = colour if counts[colour] == 1 else f"{colour}_{counts[colour]}"
        out.append((key, colour, cand, float(rng.uniform(-math.pi / 4, math.pi / 4))))
    return out
