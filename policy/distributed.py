"""Data-parallel training over processes started by torchrun (torch.distributed, DDP).

    torchrun --standalone --nproc-per-node 2 $(which arm-act) train --data ... --out ...
    torchrun --nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        --nproc-per-node 4 $(which arm-act) train ...

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK and the rendezvous address in the environment;
`process_group()` reads them, joins the group (gloo on CPU, NCCL on CUDA, each process on
cuda:LOCAL_RANK) with a timeout on every collective, and leaves it at the end. Without
those variables it is a single process and does nothing.

A rank that dies is seen by torchrun's agent, which stops the others; a rank that hangs
(or a node that drops off the network) makes the others' next collective fail after
`timeout_s` with DistributedError instead of waiting for ever.
"""
from __future__ import annotations

import contextlib
import datetime
import hashlib
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

from arm_act.policy.device import DeviceError, resolve_device

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 300.0  # longer than any validation or checkpoint write on rank 0


class DistributedError(RuntimeError):
    """The process group cannot start or a collective failed (a rank crashed or hangs)."""


@dataclass(frozen=True)
class World:
    """This process's place in the run: rank, world size, the local rank (the GPU index
    under torchrun), the device it trains on and the backend (None: single process)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    backend: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the only process that writes checkpoints, curves and metrics."""
        return self.rank == 0


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        return int(text)
    except ValueError:
        raise DistributedError(f"environment {name}={text!r} is not an integer") from None


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) as torchrun sets them; (0, 1, 0) without torchrun."""
    size = _env_int("WORLD_SIZE", 1)
    rank, local = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    if size < 1 or not 0 <= rank < size or local < 0:
        raise DistributedError(f"RANK={rank}, WORLD_SIZE={size}, LOCAL_RANK={local} are inconsistent")
    return rank, size, local


def _device_for(spec: str, local_rank: int, size: int) -> torch.device:
    device = resolve_device(spec)
    if size == 1 or device.type == "cpu":
        return device
    if ":" in str(spec):
        raise DeviceError(f"device {spec!r} names one GPU; under torchrun each process trains "
                          "on cuda:LOCAL_RANK: use --device cuda (or auto)")
    if local_rank >= torch.cuda.device_count():
        raise DeviceError(f"LOCAL_RANK={local_rank} but this node has {torch.cuda.device_count()} "
                          "CUDA device(s): start at most that many processes per node")
    return torch.device("cuda", local_rank)


@contextlib.contextmanager
def process_group(device: str = "auto", timeout_s: float = DEFAULT_TIMEOUT_S) -> Iterator[World]:
    """The World of this process, with the process group joined for the duration of the
    block when torchrun started several processes (left again at the end, also on errors).
    An already initialised group (a caller that set it up itself) is used and left alone."""
    if not timeout_s > 0:
        raise ValueError(f"timeout_s={timeout_s} must be > 0")
    rank, size, local = world_from_env()
    target = _device_for(device, local, size)
    if size == 1:
        yield World(device=target, timeout_s=timeout_s)
        return
    backend = "nccl" if target.type == "cuda" else "gloo"
    owned = not dist.is_initialized()
    if owned:
        if target.type == "cuda":
            torch.cuda.set_device(target)
        try:
            dist.init_process_group(backend=backend, timeout=datetime.timedelta(seconds=timeout_s),
                                    **({"device_id": target} if target.type == "cuda" else {}))
        except Exception as exc:  # noqa: BLE001 - rendezvous/store/NCCL errors of any type: one line
            raise DistributedError(f"rank {rank}: cannot join the process group of {size} "
                                   f"({backend}): {type(exc).__name__}: {_one_line(exc)}") from None
    else:
        backend = dist.get_backend()
    logger.info("rank %d of %d (local rank %d) on %s, backend %s", rank, size, local, target, backend)
    try:
        yield World(rank, size, local, target, backend, timeout_s)
    finally:
        if owned and dist.is_initialized():
            dist.destroy_process_group()


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


@contextlib.contextmanager
def collective(world: World, what: str) -> Iterator[None]:
    """Turn a failed or timed-out collective into one DistributedError line that names it."""
    try:
        yield
    except DistributedError:
        raise
    except Exception as exc:  # noqa: BLE001 - gloo/NCCL raise RuntimeError or DistBackendError alike
        raise DistributedError(
            f"rank {world.rank} of {world.size}: {what} with the other ranks failed "
            f"({type(exc).__name__}: {_one_line(exc)}); a rank crashed or did not answer within "
            f"{world.timeout_s:g} s") from None


def mean_over_ranks(world: World, values: Sequence[float]) -> list[float]:
    """The mean of `values` over all ranks (the values themselves for one process)."""
    if not world.distributed:
        return [float(v) for v in values]
    t = torch.tensor([float(v) for v in values], dtype=torch.float64,
                     device=world.device if world.backend == "nccl" else "cpu")
    with collective(world, "averaging the losses"):
        dist.all_reduce(t)
    return (t / world.size).tolist()


def weights_digest(module: torch.nn.Module) -> str:
    """sha256 of every parameter and buffer, in state-dict order (identical weights on every
    rank give identical digests)."""
    h = hashlib.sha256()
    for name, tensor in module.state_dict().items():
        h.update(name.encode())
        h.update(tensor.detach().to("cpu").contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_in_sync(world: World, module: torch.nn.Module, step: int) -> None:
    """DistributedError unless every rank holds exactly the same weights."""
    if not world.distributed:
        return
    digests: list[str | None] = [None] * world.size
    with collective(world, f"comparing the weights at step {step}"):
        dist.all_gather_object(digests, weights_digest(module))
    if len(set(digests)) != 1:
        raise DistributedError(f"step {step}: the ranks' weights differ ({digests}); "
                               "DDP lost synchronisation")


def barrier(world: World, what: str) -> None:
    if world.distributed:
        with collective(world, what):
            dist.barrier()


INTERRUPT_GRACE_S = 120.0  # how long a Ctrl-C waits for the ranks to save their state


def torchrun(nproc: int, argv: Sequence[str], module: str = "arm_act.cli.main") -> int:
    """Run `python -m <module> <argv>` (by default `arm-act <argv>`) in `nproc` processes on
    this machine under torchrun (`--standalone`), the shortcut behind `arm-act train
    --nproc-per-node N` and the pipeline's training stages. -> its exit status (torchrun
    reports which rank failed).

    Ctrl-C: a terminal sends SIGINT to torchrun and its ranks as well; rank 0 saves its
    training state and the ranks exit. This waits for that (a SIGINT sent to this process
    alone is passed on to torchrun first), up to INTERRUPT_GRACE_S, then stops torchrun, and
    re-raises KeyboardInterrupt. (subprocess.call would kill torchrun 0.25 s after the
    Ctrl-C and leave its ranks behind.)"""
    if nproc < 1:
        raise ValueError(f"nproc={nproc} must be >= 1")
    # torch.distributed.run, with a stop signal ending it in one line (torchrun_main).
    command = [sys.executable, "-m", "arm_act.policy.torchrun_main", "--standalone",
               f"--nproc-per-node={nproc}", "-m", module, *argv]
    logger.info("starting %s", " ".join(command))
    child = subprocess.Popen(command)
    try:
        return child.wait()
    except KeyboardInterrupt:
        _stop_after_interrupt(child)
        raise


def _stop_after_interrupt(child: subprocess.Popen) -> None:
    """After a Ctrl-C: let torchrun stop its ranks (it has the SIGINT, or gets it here) and
    wait; a second Ctrl-C, or INTERRUPT_GRACE_S without an exit, stops it (SIGTERM, then
    SIGKILL)."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)  # harmless when the terminal already sent one
    try:
        child.wait(timeout=INTERRUPT_GRACE_S)
        return
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        logger.warning("stopping torchrun without waiting for the ranks")
    child.terminate()
    try:
        child.wait(timeout=30)
    except (KeyboardInterrupt, subprocess.TimeoutExpired):
        child.kill()
        child.wait()
