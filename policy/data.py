"""Training samples from demonstration arrays: one sample per camera frame, with the chunk
of the K commands that follow it (ACT's action chunking, Zhao et al. 2023, Sec. IV-A).

Episodes are any objects with the attributes instruction (str), frame_ticks (F,) int,
images (F, C, H, W, 3) uint8, frame_state (F, S) and commands (T, A) (e.g.
arm_act.data.dataset.EpisodeArrays). Images stay where the episodes keep them: in memory,
or memory-mapped from the training cache (np.memmap), so a dataset larger than memory
trains. A batch gathers its B frames; from a mapped episode it reads them from the file
with pread instead of touching the mapping: on kernels that map whole page-cache folios
per fault (Linux 6.x), reading one 55 KB frame through the mapping made ~300 KB resident
(measured), and resident memory would grow with the dataset. The page cache still holds
what was read, for every process. The per-frame vectors (joint state, commands, targets)
are small and held in memory. Augmentation works on the whole batch at once, so no Python
loop touches pixels.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Callable, Collection, Sequence

import numpy as np
import torch

from arm_act.policy.colour import channel_medians
from arm_act.policy.config import PolicyConfig
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.vocab import UNK_ID, InstructionTokenizer, split_words

logger = logging.getLogger(__name__)

# DrQ's pad-and-random-crop (Kostrikov et al. 2021) uses 4 px at 84 px; our blocks are only
# 4-5 px wide in the fixed front camera, where a 4 px shift moves a block by its own width
# (about 3 cm on the table) and blurs where to grasp. 2 px keeps some robustness.
MAX_SHIFT = 2
BRIGHTNESS = 0.1  # multiplicative jitter range, +-10 %
CONTRAST = 0.1
def release_pages(array) -> None:
    """Drop the pages of a memory-mapped array (np.memmap) from this process's resident set
    (after reading all of it, e.g. for a fingerprint); the next access reads them again from
    the page cache or the file. Other arrays: no-op. np.memmap keeps its mapping in `_mmap`
    (numpy has no public handle for it)."""
    mapping = getattr(array, "_mmap", None)
    if isinstance(mapping, mmap.mmap) and hasattr(mapping, "madvise") and not mapping.closed:
        mapping.madvise(mmap.MADV_DONTNEED)


def file_source(array) -> tuple[str, int] | None:
    """(file, byte offset of the first element) when `array` is a whole .npy file opened
    memory-mapped (C order), so that its rows can be read with pread; else None (in-memory
    arrays, and views of a mapping, whose np.memmap.offset does not move with the view)."""
    if not isinstance(array, np.memmap) or not array.flags.c_contiguous or not array.filename:
        return None
    try:
        with open(array.filename, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                           (2, 0): np.lib.format.read_array_header_2_0}.get(version)
            if read_header is None:
                return None
            shape, fortran, dtype = read_header(f)
            start = f.tell()
    except (OSError, ValueError):
        return None
    if tuple(shape) != array.shape or fortran or dtype != array.dtype or start != array.offset:
        return None
    return array.filename, start


def validate_episode(episode, index: int, config: PolicyConfig) -> None:
    """Raise ValueError naming the episode (its `bag` when it has one) and what is wrong."""
    name = getattr(episode, "bag", f"episode {index}")
    images = np.asarray(episode.images)
    ticks = np.asarray(episode.frame_ticks)
    state = np.asarray(episode.frame_state)
    commands = np.asarray(episode.commands)
    c, size = len(config.cameras), config.image_size
    cams = getattr(episode, "cameras", None)
    if cams is not None and tuple(cams) != tuple(config.cameras):
        raise ValueError(f"{name}: has cameras {list(cams)}, the policy config wants "
                         f"{list(config.cameras)}")
    if images.dtype != np.uint8 or images.ndim != 5 or images.shape[1:] != (c, size, size, 3):
        got = "x".join(map(str, images.shape[2:4])) if images.ndim == 5 else str(images.shape)
        raise ValueError(f"{name}: images are {images.dtype} {images.shape} ({got} pixels); the "
                         f"policy config wants uint8 (F, {c}, {size}, {size}, 3) - set "
                         f"image_size to the bags' image size")
    f = images.shape[0]
    if f == 0:
        raise ValueError(f"{name}: no camera frames")
    if ticks.shape != (f,) or state.shape != (f, config.state_dim):
        raise ValueError(f"{name}: frame_ticks {ticks.shape} / frame_state {state.shape} do "
                         f"not match {f} frames of {config.state_dim} joint values")
    if commands.ndim != 2 or commands.shape[1] != config.action_dim or len(commands) == 0:
        raise ValueError(f"{name}: commands {commands.shape}, expected (T, {config.action_dim})")
    if ticks.min() < 0 or ticks.max() >= len(commands):
        raise ValueError(f"{name}: frame ticks {ticks.min()}..{ticks.max()} outside the "
                         f"{len(commands)} commanded ticks")
    for what, arr in (("frame_state", state), ("commands", commands)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}: {what} holds non-finite values")


def fit_normalizer(episodes: Sequence, cameras: Sequence[str] | None = None) -> Normalizer:
    """Statistics of the joint states at the frames and of every command; with `cameras`
    (the config's, the fixed one first), also the colour reference of policy/colour.py:
    the first camera's per-channel median over each episode's first frame (the arm at home,
    the table in view, the training light). A median with a channel at 0 (a black or
    single-colour camera) cannot be scaled back to, so such data gets no reference, and
    the runtime then runs without the balance."""
    if not episodes:
        raise ValueError("cannot compute normalization statistics without episodes")
    states = np.concatenate([np.asarray(e.frame_state, np.float64) for e in episodes])
    actions = np.concatenate([np.asarray(e.commands, np.float64) for e in episodes])
    normalizer = Normalizer.fit(states, actions)
    if not cameras:
        return normalizer
    firsts = np.stack([np.asarray(e.images[0, 0]) for e in episodes])  # (E, H, W, 3) uint8
    median = channel_medians(firsts)
    if np.any(median <= 0):
        logger.warning("no colour reference: camera %r's median colour %s has a channel at 0",
                       cameras[0], np.round(median * 255).tolist())
        return normalizer
    return normalizer.with_image_reference(cameras[0], median)


def split_episodes(n_episodes: int, val_fraction: float, seed: int
                   ) -> tuple[list[int], list[int]]:
    """Episode-level split (frames of one episode are near duplicates, so a frame-level
    split would leak). -> (train indices, val indices), both sorted. At least one
    validation episode when there are two or more and val_fraction > 0."""
    if n_episodes < 1:
        raise ValueError(f"n_episodes={n_episodes} must be >= 1")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction={val_fraction} must be in [0, 1)")
    n_val = 0
    if n_episodes >= 2 and val_fraction > 0:
        n_val = min(n_episodes - 1, max(1, int(round(val_fraction * n_episodes))))
    order = np.random.default_rng(seed).permutation(n_episodes)
    return sorted(order[n_val:].tolist()), sorted(order[:n_val].tolist())


def augment_images(images: torch.Tensor, generator: torch.Generator, max_shift: int = MAX_SHIFT,
                   colour: float = 0.0) -> torch.Tensor:
    """Random shift and brightness/contrast jitter, per sample and camera; with colour > 0
    also a gain per colour channel, uniform in [1 - colour, 1 + colour] (the light's colour
    changes: what a changed light does to a camera that the network should not care about).

    images (B, C, H, W, 3) uint8 -> (B, C, 3, H, W) float32 in [0, 1]. The shift is DrQ's
    "pad by 4 with edge pixels, crop back at a random offset": clamping the source indices
    to the image is exactly edge padding, so it is one gather with no padded copy.
    """
    b, c, h, w, _ = images.shape
    flat = images.reshape(b * c, h, w, 3)  # (BC, H, W, 3)
    shift = torch.randint(-max_shift, max_shift + 1, (2, b * c), generator=generator)
    shifted = _shift_edge_padded(flat, shift, max_shift)  # (BC, H, W, 3)
    x = shifted.permute(0, 3, 1, 2).to(torch.float32).div_(255.0)  # (BC, 3, H, W)
    jitter = torch.rand(2, b * c, 1, 1, 1, generator=generator) * 2.0 - 1.0
    contrast = 1.0 + CONTRAST * jitter[0]  # (BC, 1, 1, 1)
    brightness = 1.0 + BRIGHTNESS * jitter[1]
    mean = x.mean(dim=(1, 2, 3), keepdim=True)  # (BC, 1, 1, 1)
    x = ((x - mean) * contrast + mean) * brightness
    if colour > 0:  # drawn only when asked, so runs without it keep their random stream
        gains = 1.0 + colour * (torch.rand(b * c, 3, 1, 1, generator=generator) * 2.0 - 1.0)  # (BC, 3, 1, 1)
        x = x * gains
    return x.clamp_(0.0, 1.0).reshape(b, c, 3, h, w)  # (B, C, 3, H, W)


def _shift_edge_padded(flat: torch.Tensor, shift: torch.Tensor, pad: int) -> torch.Tensor:
    """flat (BC, H, W, 3) uint8, shift (2, BC) rows/cols in [-pad, pad] -> (BC, H, W, 3) with
    out[n, i, j] = flat[n, clamp(i + shift[0, n]), clamp(j + shift[1, n])]: the image padded
    by `pad` edge pixels once (two concatenations), then one window per image. The same
    pixels as a gather with clamped indices, at a sixth of its cost (11 -> 1.8 ms for a
    batch of 32 x 2 cameras of 96 x 96 on one core: an advanced-indexing gather of 3-byte
    pixels is not vectorised)."""
    if pad == 0:
        return flat.clone()
    bc, h, w, _ = flat.shape
    rows = torch.cat([flat[:, :1].expand(-1, pad, -1, -1), flat, flat[:, -1:].expand(-1, pad, -1, -1)], 1)
    padded = torch.cat([rows[:, :, :1].expand(-1, -1, pad, -1), rows,
                        rows[:, :, -1:].expand(-1, -1, pad, -1)], 2)  # (BC, H+2p, W+2p, 3)
    dy, dx = (shift + pad).tolist()
    return torch.stack([padded[n, dy[n]:dy[n] + h, dx[n]:dx[n] + w] for n in range(bc)])


def target_patches(uv: np.ndarray, config: PolicyConfig) -> np.ndarray:
    """(..., C, 2) pixel coordinates (NaN = unknown) -> (..., C) int64 row-major patch index
    in that camera's grid, -1 where unknown."""
    uv = np.asarray(uv, np.float64)
    known = np.isfinite(uv).all(axis=-1)
    cell = np.floor(np.where(np.isfinite(uv), uv, 0.0) / config.patch_size).astype(np.int64)
    cell = np.clip(cell, 0, config.grid - 1)
    return np.where(known, cell[..., 1] * config.grid + cell[..., 0], -1)


def final_place(frame_target: np.ndarray) -> np.ndarray:
    """(F, 3) positions of the moved block per frame -> (3,) float32: the last known one,
    where the block rests when the demonstration ends (the place head's label); NaN when
    no frame knows it."""
    target = np.asarray(frame_target, np.float32).reshape(-1, 3)
    known = np.flatnonzero(np.isfinite(target).all(axis=1))
    return target[known[-1]].copy() if len(known) else np.full(3, np.nan, np.float32)


def sentences_of(instruction: str, phrasings: Callable[[str], Sequence[str]] | None,
                 config: PolicyConfig) -> tuple[str, ...]:
    """The episode's instruction, then the other sentences `phrasings` gives for it; each
    checked against the vocabulary and the instruction token budget (ChunkDataset)."""
    out = [instruction]
    if phrasings is not None:
        out += [p for p in phrasings(instruction) if p != instruction]
        known = set(config.vocab)
        for text in out:
            words = split_words(text)
            unknown = sorted(set(words) - known)
            if unknown:
                raise ValueError(f"phrasing {text!r} has words outside the policy's vocabulary {unknown} "
                                 "(a policy trained on several phrasings needs the family vocabulary)")
            if len(words) > config.max_instruction_tokens:
                raise ValueError(f"phrasing {text!r} has {len(words)} words; max_instruction_tokens="
                                 f"{config.max_instruction_tokens}")
    return tuple(out)


class ChunkDataset:
    """Samples (one per camera frame) of a list of episodes, batched by index.

    A batch holds images (B, C, 3, H, W) float in [0, 1]; state (B, S) normalised;
    instruction_ids (B, L) long and instruction_mask (B, L) bool; actions (B, K, A): the
    normalised commands of ticks c .. c+K-1 for a frame at tick c, padded past the
    episode's end with its last command; action_mask (B, K) bool, False on padding (unless
    hold_after_end) and for episodes with has_actions=False (grounding frames: no actions,
    only a target);
    target (B, 3) float: the named block's position (m), NaN where the episode lacks it;
    target_patch (B, C) long: the patch of each camera holding the named block's centre, -1
    where unknown or outside the image;
    place (B, 3) float: where the moved block rests at the end of the episode (final_place), NaN
    for episodes without actions (grounding frames: a layout, not a demonstration);
    place_patch (B, C) long: the patch of each camera holding the place (the episodes'
    place_uv, set by data.grounding.label_demo_pixels), -1 where unknown.
    """

    def __init__(self, episodes: Sequence, config: PolicyConfig, normalizer: Normalizer,
                 hold_after_end: bool = False, phrasings: Callable[[str], Sequence[str]] | None = None,
                 word_dropout: float = 0.0, function_words: Collection[str] = ()):
        """hold_after_end: supervise the padding too, i.e. teach "after the end, hold the
        last command". Our episodes end the moment the task succeeds (block in the box,
        gripper open), so without it the chunk indices past a release are never supervised
        near the release, and the policy predicts the opening ever later (TrainConfig).

        phrasings: instruction -> the other sentences that ask for the same goal. With it, an
        augmented batch gives each sample one of its episode's sentences at random (the
        episode's own among them), so one demonstration teaches every wording; unaugmented
        batches (validation) keep the episode's own. ValueError when a sentence has a word
        outside the vocabulary or more words than the instruction tokens hold: the policy
        would be trained on <unk> or on a truncated goal.

        word_dropout: in an augmented batch, each token of a word in `function_words` (the
        vocabulary's words that carry no part of the goal) becomes <unk> with this
        probability (TrainConfig.word_dropout)."""
        if not episodes:
            raise ValueError("a ChunkDataset needs at least one episode")
        for i, episode in enumerate(episodes):
            validate_episode(episode, i, config)
        self.config = config
        self.chunk_size = config.chunk_size
        self.hold_after_end = bool(hold_after_end)
        frames = [len(e.frame_ticks) for e in episodes]
        ticks = [len(e.commands) for e in episodes]
        self.n_episodes = len(episodes)
        # Per episode, not concatenated: concatenating would read every mapped image.
        self.episode_images = [e.images for e in episodes]  # E x (F_e, C, H, W, 3) uint8
        self.frame_shape = tuple(np.shape(episodes[0].images)[1:])  # (C, H, W, 3)
        # Mapped episodes are read with pread (module docstring): (file, offset) per episode.
        self.sources = [file_source(im) for im in self.episode_images]
        state = np.concatenate([np.asarray(e.frame_state, np.float32) for e in episodes])
        self.state = torch.as_tensor(normalizer.normalize_state(state), dtype=torch.float32)
        commands = np.concatenate([np.asarray(e.commands, np.float32) for e in episodes])
        self.commands = torch.as_tensor(normalizer.normalize_action(commands),
                                        dtype=torch.float32)  # (sum T, A)
        offsets = np.concatenate([[0], np.cumsum(ticks)[:-1]])
        episode_of = np.repeat(np.arange(len(episodes)), frames)
        frame_ticks = np.concatenate([np.asarray(e.frame_ticks, np.int64) for e in episodes])
        self.episode_of = torch.from_numpy(episode_of)  # (N,)
        first_frame = np.concatenate([[0], np.cumsum(frames)[:-1]])
        self.frame_of = torch.from_numpy(np.arange(len(episode_of)) - first_frame[episode_of])  # (N,)
        self.action_start = torch.from_numpy(offsets[episode_of] + frame_ticks)  # (N,)
        self.action_end = torch.from_numpy((offsets + np.asarray(ticks))[episode_of])  # (N,)
        # Episodes with has_actions=False (grounding frames) train only the target head.
        has_actions = np.array([bool(getattr(e, "has_actions", True)) for e in episodes])
        self.has_actions = torch.from_numpy(has_actions[episode_of])  # (N,) bool
        # The named block's position per frame (auxiliary target; NaN where unknown).
        target = [np.asarray(getattr(e, "frame_target", np.full((n, 3), np.nan)), np.float32)
                  for e, n in zip(episodes, frames, strict=True)]
        self.target = torch.from_numpy(np.concatenate(target))  # (N, 3) m
        # The named block's pixel in each camera (grounding frames; NaN where unknown).
        c = len(config.cameras)
        uv = [np.asarray(getattr(e, "target_uv", np.full((n, c, 2), np.nan)), np.float32)
              for e, n in zip(episodes, frames, strict=True)]
        self.target_patch = torch.from_numpy(target_patches(np.concatenate(uv), config))  # (N, C)
        # Where the moved block ends, repeated over the episode's frames (NaN without actions).
        place = [np.broadcast_to(final_place(e.frame_target) if has else np.full(3, np.nan, np.float32), (n, 3))
                 if hasattr(e, "frame_target") else np.full((n, 3), np.nan, np.float32)
                 for e, n, has in zip(episodes, frames, has_actions, strict=True)]
        self.place = torch.from_numpy(np.concatenate(place).astype(np.float32))  # (N, 3) m
        place_uv = [np.asarray(getattr(e, "place_uv", np.full((n, c, 2), np.nan)), np.float32)
                    for e, n in zip(episodes, frames, strict=True)]
        self.place_patch = torch.from_numpy(target_patches(np.concatenate(place_uv), config))  # (N, C)
        sentences = [sentences_of(e.instruction, phrasings, config) for e in episodes]
        widest = max(len(p) for p in sentences)
        padded = [p + (p[0],) * (widest - len(p)) for p in sentences]  # padding never drawn (below)
        tokenizer = InstructionTokenizer(config.vocab, config.max_instruction_tokens)
        ids, mask = tokenizer.encode_batch([text for p in padded for text in p])
        self.instruction_ids = ids.reshape(len(episodes), widest, -1)  # (E, P, L): P sentences per episode
        self.instruction_mask = mask.reshape(len(episodes), widest, -1)
        self.n_phrasings = torch.tensor([len(p) for p in sentences])  # (E,)
        self.word_dropout = float(word_dropout)
        if self.word_dropout > 0 and not function_words:
            raise ValueError("word_dropout needs the function words that may be dropped")
        words = set(function_words)
        self.droppable = torch.tensor([w in words for w in config.vocab])  # (V,) bool
        self.unk_id = UNK_ID

    def __len__(self) -> int:
        return int(self.episode_of.shape[0])

    @property
    def memory_mapped(self) -> bool:
        """Whether episodes' images are read from their files on demand (memory-mapped cache)."""
        return any(s is not None for s in self.sources)

    def gather_images(self, index: torch.Tensor) -> torch.Tensor:
        """The uint8 frames `index` (B,) -> (B, C, H, W, 3): read from the file (pread) for a
        memory-mapped episode, copied out of the array otherwise."""
        out = np.empty((len(index), *self.frame_shape), np.uint8)
        frame_bytes = out[0].nbytes if len(out) else 0
        files: dict[str, int] = {}
        try:
            for row, (episode, frame) in enumerate(zip(self.episode_of[index].tolist(),
                                                        self.frame_of[index].tolist(), strict=True)):
                source = self.sources[episode]
                if source is None:
                    out[row] = self.episode_images[episode][frame]
                    continue
                name, start = source
                if name not in files:
                    files[name] = os.open(name, os.O_RDONLY)
                got = os.preadv(files[name], [memoryview(out[row]).cast("B")], start + frame * frame_bytes)
                if got != frame_bytes:
                    raise OSError(f"{name}: short read of frame {frame} ({got} of {frame_bytes} bytes)")
        finally:
            for fd in files.values():
                os.close(fd)
        return torch.from_numpy(out)

    @property
    def n_frames(self) -> int:
        return len(self)

    def batch(self, index: torch.Tensor, generator: torch.Generator | None = None,
              augment: bool = False, max_shift: int = MAX_SHIFT, colour: float = 0.0) -> dict[str, torch.Tensor]:
        """Samples `index` (B,) long as a batch dict (model.loss's keys). augment needs a
        generator (the only randomness drawn)."""
        index = torch.as_tensor(index, dtype=torch.long)
        uint8 = self.gather_images(index)  # (B, C, H, W, 3)
        if augment:
            if generator is None:
                raise ValueError("augment=True needs a torch.Generator")
            images = augment_images(uint8, generator, max_shift, colour)
        else:
            images = uint8.permute(0, 1, 4, 2, 3).to(torch.float32).div_(255.0)  # (B, C, 3, H, W)
        steps = torch.arange(self.chunk_size)  # (K,)
        tick = self.action_start[index, None] + steps  # (B, K)
        end = self.action_end[index, None]  # (B, 1)
        episode = self.episode_of[index]
        phrasing = torch.zeros_like(episode)  # the episode's own sentence
        if augment and self.instruction_ids.shape[1] > 1:  # drawn only with phrasings: other runs keep their stream
            phrasing = (torch.rand(len(episode), generator=generator) * self.n_phrasings[episode]).long()
        ids = self.instruction_ids[episode, phrasing]  # (B, L)
        if augment and self.word_dropout > 0:  # drawn only with dropout: other runs keep their stream
            drop = self.droppable[ids] & (torch.rand(ids.shape, generator=generator) < self.word_dropout)
            ids = ids.masked_fill(drop, self.unk_id)
        return {
            "images": images,
            "state": self.state[index],  # (B, S)
            "instruction_ids": ids,  # (B, L)
            "instruction_mask": self.instruction_mask[episode, phrasing],  # (B, L)
            "actions": self.commands[torch.minimum(tick, end - 1)],  # (B, K, A)
            "action_mask": ((tick < end) | self.hold_after_end) & self.has_actions[index, None],  # (B, K)
            "target": self.target[index],  # (B, 3) m, NaN where unknown
            "target_patch": self.target_patch[index],  # (B, C) patch index, -1 where unknown
            "place": self.place[index],  # (B, 3) m, NaN where unknown
            "place_patch": self.place_patch[index],  # (B, C) patch index, -1 where unknown
        }
