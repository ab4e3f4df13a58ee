"""The only module that calls PyBullet: one `Backend` (one BulletClient) per world.

Following panda-gym's pybullet.py, every raw pybullet call of the sim lives here, so
robot/task/camera/env code speaks numpy arrays and body/link ids only, and two worlds (two
BulletClients) can live in one process without sharing state.

Also builds, once per process and cached on disk, a variant of pybullet_data's
franka_panda/panda.urdf whose <visual> geometry is the (much smaller) collision geometry:
TinyRenderer's cost is dominated by triangle count, and the visual meshes make a camera
pair ~7x slower (5.0 against 36.6 ms per 96x96 pair: `python benchmarks/sim_figures.py`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pybullet
import pybullet_data
from pybullet_utils.bullet_client import BulletClient

logger = logging.getLogger(__name__)

PANDA_URDF = "franka_panda/panda.urdf"


@dataclass(frozen=True)
class JointInfo:
    """Static description of one joint of a multibody."""

    index: int
    name: str
    link_name: str
    movable: bool
    lower: float
    upper: float
    max_force: float
    max_velocity: float


def panda_urdf_path(collision_visuals: bool) -> str:
    """Absolute path of the Panda URDF; with collision_visuals, of the cheap-to-render variant.

    The variant replaces every <visual> mesh by the link's collision mesh, with the mtllib
    lines stripped from the copied .obj files (link6's collision mesh carries coloured test
    materials) and a plain light-grey material. It is written atomically into a cache dir
    keyed by the source URDF's hash, so concurrent processes may build it at the same time.
    """
    data = Path(pybullet_data.getDataPath())
    src = data / PANDA_URDF
    if not collision_visuals:
        return str(src)
    text = src.read_text()
    digest = hashlib.sha1(text.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("ARM_ACT_CACHE", Path(tempfile.gettempdir()) / "arm_act_cache"))
    out_dir = cache / f"panda_collision_visual_{digest}"
    out = out_dir / "panda.urdf"
    if out.exists():
        return str(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    mesh_dir = data / "franka_panda" / "meshes" / "collision"
    for obj in mesh_dir.glob("*.obj"):
        lines = [ln for ln in obj.read_text().splitlines() if not ln.startswith(("mtllib", "usemtl"))]
        _atomic_write(out_dir / obj.name, "\n".join(lines) + "\n")

    def visual_to_collision(match: re.Match) -> str:
        block = match.group(0)
        block = re.sub(r"package://meshes/visual/(\w+)\.obj", r"\1.obj", block)
        block = block.replace("package://meshes/collision/", "")
        # One light-grey material for the whole arm: contrasts with the coloured blocks.
        block = re.sub(r"<material name=\"[^\"]*\"\s*/>", _GREY, block)
        block = re.sub(r"<material name=\"[^\"]*\">.*?</material>", _GREY, block, flags=re.S)
        return block

    new = re.sub(r"<visual>.*?</visual>", visual_to_collision, text, flags=re.S)
    new = new.replace("package://meshes/collision/", str(mesh_dir) + "/")
    _atomic_write(out, new)
    logger.info("wrote collision-mesh Panda URDF variant to %s", out)
    return str(out)


_GREY = '<material name="panda_white"><color rgba="0.95 0.95 0.95 1"/></material>'


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence C-level stdout: every pybullet connect prints "argv[0]=", which would litter
    the output of commands that create one world per episode."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no usable fd 1 (e.g. some embedded interpreters): nothing to silence
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Backend:
    """A PyBullet world: wraps one BulletClient (DIRECT, or GUI when gui=True)."""

    def __init__(self, gui: bool = False) -> None:
        mode = pybullet.GUI if gui else pybullet.DIRECT
        with _quiet_stdout():
            self._client: BulletClient | None = BulletClient(connection_mode=mode)
        self._client.setAdditionalSearchPath(pybullet_data.getDataPath())
        if gui:
            self._client.configureDebugVisualizer(pybullet.COV_ENABLE_GUI, 0)

    @property
    def client(self) -> BulletClient:
        if self._client is None:
            raise RuntimeError("backend is closed")
        return self._client

    @property
    def closed(self) -> bool:
        return self._client is None

    def close(self) -> None:
        """Disconnect; safe to call more than once."""
        if self._client is not None:
            try:
                self._client.disconnect()
            except pybullet.error:  # already disconnected (e.g. GUI window closed)
                pass
            self._client = None

    # --- world -------------------------------------------------------------------------
    def reset_world(self, physics_dt: float, solver_iterations: int, gravity: float = -9.81) -> None:
        """Empty the world and set physics parameters (a fresh world per episode keeps
        trajectories bit-identical per seed: no contact caches survive a reset)."""
        c = self.client
        c.resetSimulation()
        c.setPhysicsEngineParameter(
            fixedTimeStep=physics_dt, numSolverIterations=solver_iterations,
            numSubSteps=0, deterministicOverlappingPairs=1)
        c.setGravity(0.0, 0.0, gravity)

    def step(self, n: int = 1) -> None:
        for _ in range(n):
            self.client.stepSimulation()

    def load_urdf(self, path: str, position: Sequence[float], orientation: Sequence[float] = (0, 0, 0, 1),
                  fixed_base: bool = False) -> int:
        return self.client.loadURDF(
            path, basePosition=list(position), baseOrientation=list(orientation),
            useFixedBase=fixed_base, flags=pybullet.URDF_ENABLE_CACHED_GRAPHICS_SHAPES)

    def create_boxes(self, half_extents: Sequence[Sequence[float]], offsets: Sequence[Sequence[float]],
                     rgba: Sequence[float], position: Sequence[float],
                     orientation: Sequence[float] = (0, 0, 0, 1), mass: float = 0.0,
                     lateral_friction: float = 1.0) -> int:
        """One rigid body made of boxes (half extents (n,3), centre offsets (n,3) in the body
        frame). mass=0 makes it static."""
        c = self.client
        n = len(half_extents)
        col = c.createCollisionShapeArray(
            [pybullet.GEOM_BOX] * n, halfExtents=[list(h) for h in half_extents],
            collisionFramePositions=[list(o) for o in offsets])
        vis = c.createVisualShapeArray(
            [pybullet.GEOM_BOX] * n, halfExtents=[list(h) for h in half_extents],
            visualFramePositions=[list(o) for o in offsets], rgbaColors=[list(rgba)] * n)
        body = c.createMultiBody(baseMass=mass, baseCollisionShapeIndex=col, baseVisualShapeIndex=vis,
                                 basePosition=list(position), baseOrientation=list(orientation))
        c.changeDynamics(body, -1, lateralFriction=lateral_friction)
        return body

    def create_primitive(self, shape: str, radius: float, height: float, rgba: Sequence[float],
                         position: Sequence[float], mass: float, lateral_friction: float = 1.0) -> int:
        """One rigid sphere (height ignored) or upright cylinder (sim.perturb's distractors)."""
        c = self.client
        if shape == "sphere":
            col = c.createCollisionShape(pybullet.GEOM_SPHERE, radius=radius)
            vis = c.createVisualShape(pybullet.GEOM_SPHERE, radius=radius, rgbaColor=list(rgba))
        elif shape == "cylinder":
            col = c.createCollisionShape(pybullet.GEOM_CYLINDER, radius=radius, height=height)
            vis = c.createVisualShape(pybullet.GEOM_CYLINDER, radius=radius, length=height, rgbaColor=list(rgba))
        else:
            raise ValueError(f"shape={shape!r} must be 'sphere' or 'cylinder'")
        body = c.createMultiBody(baseMass=mass, baseCollisionShapeIndex=col, baseVisualShapeIndex=vis,
                                 basePosition=list(position))
        c.changeDynamics(body, -1, lateralFriction=lateral_friction, rollingFriction=0.01,
                         spinningFriction=0.001)
        return body

    def set_dynamics(self, body: int, link: int, **kwargs: float) -> None:
        self.client.changeDynamics(body, link, **kwargs)

    # --- bodies ------------------------------------------------------------------------
    def base_pose(self, body: int) -> tuple[np.ndarray, np.ndarray]:
        """(position (3,), orientation (4,) xyzw) of a body's base."""
        pos, orn = self.client.getBasePositionAndOrientation(body)
        return np.array(pos, dtype=np.float64), np.array(orn, dtype=np.float64)

    def set_base_pose(self, body: int, position: Sequence[float], orientation: Sequence[float]) -> None:
        """Teleport a body (and zero its velocity)."""
        self.client.resetBasePositionAndOrientation(body, list(position), list(orientation))
        self.client.resetBaseVelocity(body, [0.0, 0.0, 0.0], [0.0, 0.0, 0.0])

    def base_velocity(self, body: int) -> tuple[np.ndarray, np.ndarray]:
        lin, ang = self.client.getBaseVelocity(body)
        return np.array(lin), np.array(ang)

    # --- joints ------------------------------------------------------------------------
    def joints(self, body: int) -> list[JointInfo]:
        c = self.client
        out = []
        for j in range(c.getNumJoints(body)):
            info = c.getJointInfo(body, j)
            out.append(JointInfo(
                index=j, name=info[1].decode(), link_name=info[12].decode(),
                movable=info[2] in (pybullet.JOINT_REVOLUTE, pybullet.JOINT_PRISMATIC),
                lower=float(info[8]), upper=float(info[9]), max_force=float(info[10]),
                max_velocity=float(info[11])))
        return out

    def reset_joints(self, body: int, joints: Sequence[int], positions: Sequence[float]) -> None:
        for j, q in zip(joints, positions, strict=True):
            self.client.resetJointState(body, j, float(q), 0.0)

    def joint_states(self, body: int, joints: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(position, velocity, applied motor effort), each (len(joints),) float64."""
        states = self.client.getJointStates(body, list(joints))
        arr = np.array([(s[0], s[1], s[3]) for s in states], dtype=np.float64)
        return arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy()

    def position_control(self, body: int, joints: Sequence[int], targets: Sequence[float],
                         forces: Sequence[float], position_gains: Sequence[float]) -> None:
        self.client.setJointMotorControlArray(
            body, list(joints), pybullet.POSITION_CONTROL, targetPositions=list(targets),
            forces=list(forces), positionGains=list(position_gains))

    def couple_joints(self, body: int, joint_a: int, joint_b: int, ratio: float, max_force: float) -> None:
        """Gear constraint between two joints of a body (gearRatio=-1 with these axes keeps the
        two Panda fingers symmetric), as in pybullet's examples
        (gym/pybullet_robots/panda/panda_sim_grasp.py). PyBullet ignores URDF <mimic> tags."""
        c = self.client
        cid = c.createConstraint(body, joint_a, body, joint_b, jointType=pybullet.JOINT_GEAR,
                                 jointAxis=[1, 0, 0], parentFramePosition=[0, 0, 0],
                                 childFramePosition=[0, 0, 0])
        c.changeConstraint(cid, gearRatio=ratio, erp=0.1, maxForce=max_force)

    def link_pose(self, body: int, link: int) -> tuple[np.ndarray, np.ndarray]:
        """World (position (3,), orientation (4,) xyzw) of a link's URDF frame."""
        state = self.client.getLinkState(body, link, computeForwardKinematics=True)
        return np.array(state[4], dtype=np.float64), np.array(state[5], dtype=np.float64)

    def inverse_kinematics(self, body: int, link: int, position: Sequence[float],
                           orientation: Sequence[float], lower: Sequence[float], upper: Sequence[float],
                           rest: Sequence[float], max_iterations: int = 50,
                           threshold: float = 1e-5) -> np.ndarray:
        """Damped-least-squares IK with null-space bias to `rest`, starting from the body's
        current joint positions (reset them to seed it); returns all movable joints.

        pybullet's currentPositions argument is deliberately not used: with it the result
        was offset by ~5 cm in z for panda_grasptarget (measured), while seeding through
        resetJointState gives sub-millimetre results."""
        ranges = [u - lo for lo, u in zip(lower, upper, strict=True)]
        q = self.client.calculateInverseKinematics(
            body, link, list(position), list(orientation), lowerLimits=list(lower),
            upperLimits=list(upper), jointRanges=ranges, restPoses=list(rest),
            maxNumIterations=max_iterations,
            residualThreshold=threshold)
        return np.array(q, dtype=np.float64)

    # --- rendering ---------------------------------------------------------------------
    def render(self, width: int, height: int, view: Sequence[float], projection: Sequence[float],
               light: dict | None = None) -> np.ndarray:
        """RGB image (height, width, 3) uint8, a fresh array. TinyRenderer, no shadows, no
        segmentation mask: the cheapest CPU path (docs/architecture.md, "Design measurements").
        light: getCameraImage's light keyword arguments (lightDirection, lightColor,
        lightAmbientCoeff, ...; sim.perturb's lighting), None for PyBullet's defaults."""
        _, _, rgba, _, _ = self.client.getCameraImage(
            width, height, viewMatrix=list(view), projectionMatrix=list(projection), shadow=0,
            renderer=pybullet.ER_TINY_RENDERER, flags=pybullet.ER_NO_SEGMENTATION_MASK, **(light or {}))
        img = np.asarray(rgba, dtype=np.uint8).reshape(height, width, 4)
        return np.ascontiguousarray(img[:, :, :3])


# --- geometry helpers (pure numpy; no client needed) -----------------------------------
def quat_to_matrix(q: Sequence[float]) -> np.ndarray:
    """Rotation matrix (3,3) of a unit quaternion (x, y, z, w)."""
    x, y, z, w = q
    return np.array([
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ])


def quat_from_yaw(yaw: float) -> np.ndarray:
    """Quaternion (x, y, z, w) of a rotation by `yaw` about world z."""
    return np.array([0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)])


def yaw_of(q: Sequence[float]) -> float:
    """Rotation about z of quaternion q (x, y, z, w), radians."""
    x, y, z, w = q
    return float(np.arctan2(2 * (w * z + x * y), 1 - 2 * (y * y + z * z)))


def quat_multiply(a: Sequence[float], b: Sequence[float]) -> np.ndarray:
    """Hamilton product a*b of quaternions in (x, y, z, w) order."""
    ax, ay, az, aw = a
    bx, by, bz, bw = b
    return np.array([
        aw * bx + ax * bw + ay * bz - az * by,
        aw * by - ax * bz + ay * bw + az * bx,
        aw * bz + ax * by - ay * bx + az * bw,
        aw * bw - ax * bx - ay * by - az * bz,
    ])


def view_matrix(eye: np.ndarray, target: np.ndarray, up: np.ndarray) -> list[float]:
    """OpenGL view matrix (column-major 16 floats), same as pybullet.computeViewMatrix."""
    return list(pybullet.computeViewMatrix(list(eye), list(target), list(up)))


def projection_matrix(fov_deg: float, aspect: float, near: float, far: float) -> list[float]:
    """OpenGL projection matrix (column-major 16 floats) for a vertical field of view."""
    return list(pybullet.computeProjectionMatrixFOV(fov_deg, aspect, near, far))
