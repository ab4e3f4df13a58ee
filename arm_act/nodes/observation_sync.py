"""ObservationSync: policy_node's cameras and joint states, matched by stamp.

sim_node renders both cameras and measures the joints at the same instant and stamps them
alike, but DDS may deliver them in any order (a large image after the next joint state).
This class keeps the newest image of each camera and, in realtime, the joint states of the
last few stamps, and answers the questions the node asks of them: is a camera pair
complete, which pair is due for inference and with which joint state, when did the
running episode's first joint state come, are the observations stale. It holds no lock
and knows no ROS node: policy_node calls it with its lock held.

The two timing modes use it differently. Realtime infers on the newest complete pair
once the joint state of its tick is here (`pair_due`, `take_pair`) and starts each
episode from that episode's own first joint state (`start_episode`). Lockstep infers on
the pair of each camera tick as the tick's observation completes (`tick_complete`).
"""
from __future__ import annotations

import cv2
import numpy as np

from arm_act.ros import conversions as conv

MAX_IMAGE_PIXELS = 4096 * 4096
JOINT_HISTORY = 16  # realtime: joint states kept by stamp (0.16 s at 100 Hz) to pair camera pairs with


class ObservationSync:
    """The newest image per camera, the camera pairs handed to inference, and (realtime) the
    joint states of the last few stamps."""

    def __init__(self, cameras: tuple[str, ...], realtime: bool, max_future_s: float, history: int = JOINT_HISTORY):
        self.cameras = tuple(cameras)
        self.realtime = realtime
        self.max_future_s = max_future_s  # images stamped further ahead of /clock are refused (s)
        self.history = history
        self.image_size: int | None = None  # the policy's, once configured
        self.images: dict[str, tuple[int, np.ndarray]] = {}  # camera -> (stamp ns, (H, W, 3))
        self.last_pair_ns = -1  # the newest camera pair handed to inference
        self.pair_ns: int | None = None  # the newest complete camera pair received
        self.submitted_ns = -1  # lockstep: the newest camera tick handed to inference
        # Realtime: the joint states of the last few stamps (ns -> (9,)), so a camera pair is
        # inferred with the joint state of its own tick even when a later one came first; and
        # the episode the selector was last reset for (from a joint state of that episode).
        self.joint_history: dict[int, np.ndarray] = {}
        self.started_episode: int | None = None

    def configure(self, cameras: tuple[str, ...], image_size: int) -> None:
        """The loaded policy's cameras (their order is the policy's) and image size."""
        self.cameras = tuple(cameras)
        self.image_size = image_size

    # ------------------------------------------------------------ images
    def decode(self, camera: str, msg, clock_ns: int = -1) -> tuple[int, np.ndarray]:
        """(stamp ns, RGB image at the policy's size) of an Image message; ConversionError with
        the reason when the node cannot use it (frame, size, a stamp ahead of /clock, encoding)."""
        expected = conv.optical_frame(camera)
        if msg.header.frame_id not in ("", expected):
            raise conv.ConversionError(f"frame_id {msg.header.frame_id[:80]!r}, expected {expected!r} or empty")
        if int(msg.height) * int(msg.width) > MAX_IMAGE_PIXELS:
            raise conv.ConversionError(f"image is {msg.width}x{msg.height}, over {MAX_IMAGE_PIXELS} pixels")
        stamp = conv.stamp_to_ns(msg.header.stamp)
        if clock_ns >= 0 and stamp > clock_ns + self.max_future_s * 1e9:
            raise conv.ConversionError(f"stamped {stamp * 1e-9:.3f} s, more than {self.max_future_s:.0f} s ahead of "
                                       f"/clock ({clock_ns * 1e-9:.3f} s)")
        return stamp, self.fit_size(conv.image_from_msg(msg))

    def fit_size(self, rgb: np.ndarray) -> np.ndarray:
        """A square image scaled to the policy's size (as it is before configure); a
        non-square one is refused rather than distorted."""
        size = self.image_size or rgb.shape[0]
        h, w = rgb.shape[:2]
        if (h, w) == (size, size):
            return rgb
        if abs(h / w - 1.0) > 0.01:
            raise conv.ConversionError(f"image is {w}x{h}; the policy needs square images")
        return cv2.resize(np.ascontiguousarray(rgb), (size, size), interpolation=cv2.INTER_AREA)

    def add_image(self, camera: str, stamp: int, rgb: np.ndarray) -> bool:
        """Keep the camera's newest image; True when it completes a camera pair newer than the
        last one handed to inference (then `pair_ns`)."""
        self.images[camera] = (stamp, rgb)
        stamps = {self.images[c][0] for c in self.cameras if c in self.images}
        complete_pair = len(stamps) == 1 and all(c in self.images for c in self.cameras)
        if complete_pair and stamp > self.last_pair_ns:
            self.pair_ns = stamp
            return True
        return False

    def has_pair(self, stamp_ns: int) -> bool:
        """Every camera's newest image is stamped `stamp_ns`."""
        return all(c in self.images and self.images[c][0] == stamp_ns for c in self.cameras)

    def sized_for_policy(self) -> bool:
        """False for images received before configure knew the policy's image size."""
        return all(self.images[c][1].shape[0] == self.image_size for c in self.cameras)

    def pair_images(self) -> dict[str, np.ndarray]:
        return {c: self.images[c][1] for c in self.cameras}

    def newest_stamp(self) -> int:
        """The stamp of the newest image of any camera, -1 before the first."""
        return max((s for s, _ in self.images.values()), default=-1)

    def stale(self, now_ns: int, joint_stamp_ns: int, timeout_ns: int) -> bool:
        """The joint state or the newest image of a camera received so far is older than
        `timeout_ns` at `now_ns` (stale too before any image came)."""
        oldest_camera = min((self.images[c][0] for c in self.cameras if c in self.images), default=-1)
        return now_ns - joint_stamp_ns > timeout_ns or now_ns - oldest_camera > timeout_ns

    # ------------------------------------------------------------ joint states and pairs (realtime)
    def add_joints(self, stamp: int, positions: np.ndarray | None) -> None:
        """Realtime: remember the joint state by stamp (the newest `history` of them)."""
        if not self.realtime or positions is None:
            return
        history = self.joint_history
        history[stamp] = positions
        while len(history) > self.history:
            del history[min(history)]

    def pair_due(self, joint_stamp_ns: int) -> int | None:
        """Realtime: the stamp of the newest complete camera pair not yet inferred, once a joint
        state of its tick (or a later one) is here; None while there is none, or while an image
        of a newer pair has arrived and the rest of that pair is on its way."""
        pair = self.pair_ns
        if not self.realtime or pair is None or pair <= self.last_pair_ns or joint_stamp_ns < pair:
            return None
        if not all(self.images[c][0] == pair for c in self.cameras):
            return None
        return pair

    def take_pair(self, pair: int) -> np.ndarray | None:
        """Mark the pair as handed to inference; the joint state of its own tick, None when that
        one never came (a later one stands in)."""
        self.last_pair_ns = pair
        return self.joint_history.get(pair)

    def start_episode(self, info: conv.EpisodeInfo | None, joints: np.ndarray | None, joint_stamp_ns: int,
                      selector) -> bool:
        """Realtime: whether the selector has been reset for the running episode `info`, resetting
        it now once a joint state of that episode is here. The first control tick of an episode
        can come before it: sim_node publishes /clock at the episode's start twice (the episode,
        then its first observation), and a tick that acts on the second one acts on the previous
        episode's last joint state. A selector reset from that pose would limit the first
        commands towards where the last episode ended. The reset pose is the episode's first
        joint state when kept, else the newest. Lockstep: always False (the node resets the
        selector at the episode's first tick)."""
        if not self.realtime or selector is None or info is None or info.state != "running":
            return False
        if self.started_episode == info.episode:
            return True
        if joints is None or joint_stamp_ns < info.start_ns:
            return False  # only the previous episode's joint states so far
        selector.reset(self.joint_history.get(info.start_ns, joints))
        self.started_episode = info.episode
        return True

    def tick_complete(self, stamp_ns: int, tick: int, camera_tick: bool, selector, submit) -> bool:
        """Lockstep: whether the policy's part of tick `tick`'s observation is here and every chunk
        usable by then computed. On a camera tick that needs both cameras' images of the tick;
        the first time they are all here, `submit(stamp_ns, tick)` hands them to inference."""
        if camera_tick:
            if not self.has_pair(stamp_ns):
                return False
            if not selector.is_known(tick) and stamp_ns > self.submitted_ns:
                self.submitted_ns = stamp_ns
                submit(stamp_ns, tick)
        return not selector.awaiting(tick)

    # ------------------------------------------------------------ chunks
    def chunk_ended(self, episode: int, info: conv.EpisodeInfo | None) -> bool:
        """Whether a chunk inferred for `episode` belongs to an episode that has ended by now.
        Realtime: any other episode than the one the selector was last reset for, or none
        running; lockstep: any other than the current one."""
        if self.realtime:
            return episode != self.started_episode or info is None or info.state != "running"
        return info is None or info.episode != episode

    def usable_tick(self, tick: int) -> int | None:
        """The tick from which a chunk of the pair of `tick` may act. Realtime: from now on
        (inference has taken its real time); lockstep: None, the selector's tick + latency_ticks."""
        return tick if self.realtime else None

    def clock_reset(self, now_ns: int) -> None:
        """Sim time went back (a restarted sim_node): pairs, joint history and the started
        episode of the old timeline would hold back every newer-looking check, so they go;
        images stamped after `now_ns` too."""
        self.last_pair_ns, self.pair_ns = -1, None
        self.images = {c: v for c, v in self.images.items() if v[0] <= now_ns}
        self.joint_history.clear()
        self.started_episode = None
