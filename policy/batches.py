"""The stream of training batches when training is data-parallel or on a GPU: drawn off the
training thread, pinned and copied to the device without blocking it.

One global stream of sample indices (epochs of random permutations from one generator,
the same on every rank) is cut into global batches of `batch_size`; rank r of W trains on
its slice of batch_size / W samples. Everything else random in a step (augmentation, CVAE
noise, dropout) is seeded from (seed, step, rank) alone, so a step's batch depends on
nothing but the stream's position: batches can be prepared ahead, and a resume, with the
same or another number of processes, continues the same global stream.

The single-process CPU run keeps its own, older order of draws (policy/train.py), so its
results stay bit-identical to runs made before this module existed.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

STREAMS = {"augment": 0, "noise": 1, "dropout": 2}


def step_seed(seed: int, step: int, rank: int, stream: str) -> int:
    """A 63-bit seed for one step's draws of one kind on one rank (SeedSequence mixes the
    words, so neighbouring steps or ranks get unrelated generators)."""
    words = np.random.SeedSequence([seed, step, rank, STREAMS[stream]]).generate_state(2, np.uint32)
    return int((int(words[0]) << 31) ^ int(words[1])) & ((1 << 63) - 1)


class Sampler:
    """Epochs of random permutations cut into batches (a batch may span two epochs)."""

    def __init__(self, n: int, generator: torch.Generator):
        self.n, self.generator = n, generator
        self.order = torch.randperm(n, generator=generator)
        self.pos = 0

    def next(self, batch_size: int) -> torch.Tensor:
        parts, need = [], batch_size
        while need:
            if self.pos == self.n:
                self.order = torch.randperm(self.n, generator=self.generator)
                self.pos = 0
            take = min(need, self.n - self.pos)
            parts.append(self.order[self.pos:self.pos + take])
            self.pos += take
            need -= take
        return torch.cat(parts)

    def state(self) -> StreamState:
        # order is replaced, never written in place, so holding it is holding a snapshot
        return StreamState(self.generator.get_state(), self.order, self.pos)


@dataclass(frozen=True)
class StreamState:
    """Where the global stream stands: what a checkpoint saves and a resume restores."""

    generator: torch.Tensor
    order: torch.Tensor
    pos: int


@dataclass
class Prepared:
    step: int  # the step this batch is for
    batch: dict[str, torch.Tensor]
    after: StreamState  # the stream's position once this batch is taken


class BatchStream:
    """Batches for steps start, start+1, ... from `make(step, index)`, which builds this
    rank's batch from its slice of the global batch `index`.

    prefetch=0: each batch is made when asked for, on the calling thread. prefetch=N: a
    thread keeps up to N batches ready, in pinned memory when the device is a GPU, and
    `next()` starts their copy to the device without waiting for it (non_blocking)."""

    def __init__(self, sampler: Sampler, global_batch: int, rank: int, world_size: int,
                 make: Callable[[int, torch.Tensor], dict[str, torch.Tensor]], start: int,
                 device: torch.device, prefetch: int = 0):
        if global_batch % world_size:
            raise ValueError(f"batch_size={global_batch} is not divisible by the {world_size} processes")
        self.sampler, self.make, self.device = sampler, make, device
        self.per_rank = global_batch // world_size
        self.global_batch, self.rank = global_batch, rank
        self.step = start
        self.prefetch = int(prefetch)
        self.pin = device.type == "cuda"
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, self.prefetch))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self.prefetch > 0:
            self._thread = threading.Thread(target=self._fill, name="batch-prefetch", daemon=True)
            self._thread.start()

    def _prepare(self, step: int) -> Prepared:
        index = self.sampler.next(self.global_batch)
        mine = index[self.rank * self.per_rank:(self.rank + 1) * self.per_rank]
        batch = self.make(step, mine)
        if self.pin:
            batch = {k: v.pin_memory() for k, v in batch.items()}
        return Prepared(step, batch, self.sampler.state())

    def _fill(self) -> None:
        step = self.step
        while not self._stop.is_set():
            try:
                item: Prepared | BaseException = self._prepare(step)
            except BaseException as exc:  # noqa: BLE001 - handed to the training thread, which raises it
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return
            step += 1

    def next(self) -> Prepared:
        """The next step's batch, on the device."""
        if self._thread is None:
            item = self._prepare(self.step)
        else:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
        assert item.step == self.step, (item.step, self.step)
        self.step += 1
        if self.device.type != "cpu":
            item.batch = {k: v.to(self.device, non_blocking=True) for k, v in item.batch.items()}
        return item

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
