"""Episode schedules: which seed and block count each episode uses.

Shared by sim_node, `arm-act eval` and `arm-act collect`, so episode i of a run with seed S
is the same scene everywhere: seed S + i, and a block count drawn from that seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_BLOCKS, MAX_BLOCKS = 2, 6


def parse_blocks(text: str) -> tuple[int, int]:
    """"3" -> (3, 3); "2-5" -> (2, 5). Raises ValueError quoting the text."""
    lo, sep, hi = str(text).strip().partition("-")
    try:
        low, high = int(lo), int(hi if sep else lo)
    except ValueError:
        raise ValueError(f"blocks={text!r} must be N or LO-HI, e.g. 2-5") from None
    if not MIN_BLOCKS <= low <= high <= MAX_BLOCKS:
        raise ValueError(f"blocks={text!r} must lie within {MIN_BLOCKS}-{MAX_BLOCKS}")
    return low, high


@dataclass(frozen=True)
class EpisodeSpec:
    index: int
    seed: int
    n_blocks: int


def episode_spec(index: int, seed: int, blocks: tuple[int, int]) -> EpisodeSpec:
    """Episode `index` of a run: seed + index; the block count is drawn from a generator
    seeded by that episode seed, so it does not depend on the other episodes."""
    episode_seed = seed + index
    low, high = blocks
    n_blocks = low if low == high else int(np.random.default_rng([episode_seed, 7]).integers(low, high + 1))
    return EpisodeSpec(index=index, seed=episode_seed, n_blocks=n_blocks)


class EpisodeSchedule:
    """Iterates episode specs; episodes=0 means without end."""

    def __init__(self, seed: int, blocks: tuple[int, int], episodes: int = 0):
        if episodes < 0:
            raise ValueError(f"episodes={episodes} must be >= 0")
        self.seed, self.blocks, self.episodes = seed, blocks, episodes
        self._next = 0

    def next(self) -> EpisodeSpec | None:
        if self.episodes and self._next >= self.episodes:
            return None
        spec = episode_spec(self._next, self.seed, self.blocks)
        self._next += 1
        return spec
