"""Shared fixtures. ROS tests run on a private rclpy.Context in their own DDS domain,
restricted to localhost, so parallel runs never see each other. Under pytest-xdist (`make
test` runs three workers) each worker draws its domains from its own share of 100-229.

Test layers: every test carries exactly one of the markers `unit`, `ros` or `e2e`
(registered in pyproject.toml); the collection fails otherwise, so `make test-fast`
(`-m unit`) cannot silently skip a test that nobody classified."""
from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time

import pytest

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
FIRST_DOMAIN, DOMAINS = 100, 130  # the tests' contexts use 100-229; 230-232 are fixed ones of single tests
_worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_span = DOMAINS // max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
# Each worker's share, entered at a place that depends on the process, so two test runs at
# once rarely meet either.
_domain_ids = (FIRST_DOMAIN + _worker * _span + i % _span for i in itertools.count(os.getpid() % _span))

LAYERS = ("unit", "ros", "e2e")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything: every collected test is checked
def pytest_collection_modifyitems(config, items):
    problems = []
    for item in items:
        layers = [name for name in LAYERS if item.get_closest_marker(name) is not None]
        if len(layers) != 1:
            problems.append(f"{item.nodeid}: {', '.join(layers) if layers else 'no layer marker'}")
    if problems:
        raise pytest.UsageError(
            f"every test needs exactly one of the markers {', '.join(LAYERS)}:\n  " + "\n  ".join(problems))


@pytest.fixture
def ros_context(request):
    """A private, initialised rclpy context in a fresh domain; shut down afterwards. Only for
    tests marked `ros` or `e2e`: a `unit` test that starts DDS is in the wrong layer."""
    import rclpy

    if request.node.get_closest_marker("unit") is not None:
        pytest.fail(f"{request.node.nodeid} starts rclpy/DDS (ros_context): mark it `ros`, not `unit`")

    context = rclpy.Context()
    rclpy.init(context=context, domain_id=next(_domain_ids))
    try:
        yield context
    finally:
        if context.ok():
            rclpy.shutdown(context=context)


def spin_until(executor, condition, timeout: float, step: float = 0.05) -> bool:
    """Spin `executor` until condition() is true or `timeout` wall seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        executor.spin_once(timeout_sec=step)
    return condition()


@contextlib.contextmanager
def spinning(executor):
    """Spin `executor` in a background thread for the duration of the block (executor.spin()
    serves every ready callback each round; spin_once from a loop can starve late
    subscriptions)."""

    def spin():
        try:
            executor.spin()
        except Exception:  # noqa: BLE001 - the context shuts down under it at the end of a test
            pass

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield executor
    finally:
        executor.shutdown(timeout_sec=5.0)
        thread.join(timeout=5.0)


@contextlib.contextmanager
def spinning_nodes(context, *nodes):
    """`nodes` on one SingleThreadedExecutor of `context`, spinning in a background thread for
    the duration of the block (`spinning`); every node is destroyed after it."""
    from rclpy.executors import SingleThreadedExecutor

    executor = SingleThreadedExecutor(context=context)
    for node in nodes:
        executor.add_node(node)
    try:
        with spinning(executor):
            yield executor
    finally:
        for node in nodes:
            node.destroy_node()
        executor.shutdown()


def wait_for(condition, timeout: float, step: float = 0.02) -> bool:
    """Poll condition() until true or timeout (while a `spinning` executor serves callbacks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """A tiny policy checkpoint (random weights, target head on) for node tests: width 32,
    1 encoder layer, chunk 10, the sim's table colour as its colour reference (so the colour
    balance runs, with gains of 1 under the sim's light). A test module may define its own
    to override it."""
    import numpy as np
    import torch

    from arm_act.policy.checkpoint import save_checkpoint
    from arm_act.policy.config import PolicyConfig
    from arm_act.policy.model import ACTPolicy
    from arm_act.policy.normalizer import Normalizer

    torch.manual_seed(0)
    config = PolicyConfig(width=32, heads=4, encoder_layers=1, chunk_size=10, dropout=0.0, target_weight=1.0)
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    normalizer = Normalizer(np.zeros(9), np.ones(9), np.zeros(8), np.full(8, 0.3),
                            {"camera": "front", "median": (np.array([148, 136, 119]) / 255).tolist()})
    save_checkpoint(path, ACTPolicy(config), normalizer, None)
    return path

