"""Independent jobs (one episode each) as Ray tasks, on a local Ray instance or a cluster,
for `arm-act collect --ray` and `arm-act eval --ray`. Knows nothing of episodes.

    with ray_session("local", local_cpus=2):
        results = run_tasks(fn, items, desc="collect", unit="ep")

address: "local" starts a Ray instance on this machine (stopped again at the end);
"auto" joins the cluster this machine belongs to (`ray start` ran here); "ray://HOST:PORT"
connects to a cluster's Ray Client server (ray[client]; a cluster with Ray's token
authentication also wants RAY_AUTH_MODE=token and its token here, in ~/.ray/auth_token or
RAY_AUTH_TOKEN). The package must be installed on every node
(the tasks import arm_act there); nothing assumes a shared file system: what a task writes
comes back to the driver as bytes (`files_under` in the task, `write_files` on the driver).

A task that fails (an exception in it, or its worker process dying) is run once more;
both the first failure and the retry's outcome are reported (`TaskReport`). Ctrl-C
cancels every task still pending or running and re-raises KeyboardInterrupt.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from arm_act.common.progress import progress_bar

logger = logging.getLogger(__name__)

LOCAL = "local"


class RayPoolError(RuntimeError):
    """Ray cannot start or connect, or a task failed twice; the message is one line."""


@dataclass
class TaskReport:
    """What happened to the tasks of one run: the failed first attempts (index -> error)
    that were retried, and those whose retry failed too."""

    retried: dict[int, str] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"retried": {str(k): v for k, v in sorted(self.retried.items())},
                "failed": {str(k): v for k, v in sorted(self.failed.items())}}


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:400]}"


@contextlib.contextmanager
def ray_session(address: str, local_cpus: int | None = None) -> Iterator[None]:
    """Ray connected for the duration of the block. A session already open in this process
    (e.g. a test's) is used as it is and left open."""
    import ray

    if ray.is_initialized():
        yield
        return
    if not address:
        raise RayPoolError("--ray needs an address: local, auto or ray://HOST:PORT")
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address == LOCAL:
        options.update(num_cpus=local_cpus or os.cpu_count() or 1, include_dashboard=False)
    else:  # a running cluster has its own resources and dashboard settings
        options["address"] = address
    try:
        ray.init(**options)
    except Exception as exc:  # noqa: BLE001 - ConnectionError, RuntimeError, grpc errors alike: one line
        raise RayPoolError(f"cannot {'start a local Ray instance' if address == LOCAL else f'join Ray at {address}'}"
                           f" ({_one_line(exc)})") from None
    try:
        yield
    finally:
        ray.shutdown()


def run_tasks(fn: Callable[[Any], Any], items: Sequence[Any], *, desc: str = "tasks", unit: str = "it",
              num_cpus: float = 1.0, on_result: Callable[[int, Any], None] | None = None,
              report: TaskReport | None = None, shared: Mapping[str, Any] | None = None,
              progress: bool | None = None) -> list[Any]:
    """fn(item) for every item, one Ray task each (inside ray_session), with the results in
    item order. `shared`: objects every task needs (e.g. a checkpoint's bytes), put in the
    object store once and passed as fn(item, **shared). on_result(index, result) runs on
    the driver as each task finishes. progress: a bar of finished tasks (None: when stderr
    is a terminal; False when the caller draws its own from on_result). Raises RayPoolError when a task fails twice (the
    other tasks are cancelled), and KeyboardInterrupt after cancelling on Ctrl-C."""
    import ray

    report = report if report is not None else TaskReport()
    # max_retries=0: retries are ours, so that each one is seen and reported.
    remote = ray.remote(num_cpus=num_cpus, max_retries=0)(fn)
    refs_shared = {k: ray.put(v) for k, v in (shared or {}).items()}

    def submit(index: int):
        return remote.remote(items[index], **refs_shared)

    pending = {submit(i): i for i in range(len(items))}
    results: dict[int, Any] = {}
    with progress_bar(len(items), desc, unit=unit, force=progress) as bar:
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                ref = ready[0]
                index = pending.pop(ref)
                try:
                    result = ray.get(ref)
                except (ray.exceptions.RayTaskError, ray.exceptions.WorkerCrashedError,
                        ray.exceptions.RayActorError, ray.exceptions.NodeDiedError,
                        ray.exceptions.ObjectLostError) as exc:
                    error = _one_line(getattr(exc, "cause", None) or exc)
                    if index in report.retried:
                        report.failed[index] = error
                        raise RayPoolError(f"{desc}: task {index} failed twice ({report.retried[index]}; "
                                           f"then {error})") from None
                    report.retried[index] = error
                    logger.warning("%s: task %d failed (%s); running it once more", desc, index, error)
                    pending[submit(index)] = index
                    continue
                results[index] = result
                if on_result is not None:
                    on_result(index, result)
                bar.update(1)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    return [results[i] for i in range(len(items))]


def files_under(root: Path) -> dict[str, bytes]:
    """Every file under `root` as {relative posix path: bytes} (what a task sends back)."""
    root = Path(root)
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_files(root: Path, files: Mapping[str, bytes]) -> list[Path]:
    """Write {relative path: bytes} under `root` on the driver; refuses paths that leave it."""
    root = Path(root)
    written = []
    for name, data in files.items():
        path = (root / name).resolve()
        if root.resolve() not in path.parents:
            raise RayPoolError(f"a task sent back {name!r}, outside {root}")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        written.append(path)
    return written
