"""arm_act/ros/private_domain.py: the private DDS domain of `arm-act eval --live` and `arm-act
bench` over DDS. A real probe node spins in it and hears a real publisher on the same domain;
whatever ends the block (an exception, a KeyboardInterrupt), the children are stopped first
while the probe still spins, then the probe is destroyed, the context shut down and
ROS_AUTOMATIC_DISCOVERY_RANGE restored."""
from __future__ import annotations

import os

import pytest
from conftest import wait_for
from rclpy.executors import ExternalShutdownException

from arm_act.ros.private_domain import RANGE, PrivateDomain

pytestmark = pytest.mark.ros

DOMAIN = 230  # the tests' own contexts use 100-229 (conftest.py), test_processes.py 231


class _Children:
    """Stands in for NodeProcesses: notes what was still up when it was stopped."""

    def __init__(self, dds: PrivateDomain):
        self.dds = dds
        self.stopped_with: dict | None = None

    def stop(self) -> None:
        self.stopped_with = {"context_ok": self.dds.context.ok(), "spinning": self.dds.spinner.is_alive(),
                             "range": os.environ.get(RANGE)}


def _spin_until_heard(dds: PrivateDomain) -> list:
    import rclpy
    from std_msgs.msg import String

    heard = []
    probe = rclpy.create_node("probe", context=dds.context)
    probe.create_subscription(String, "ping", lambda msg: heard.append(msg.data), 10)
    dds.spin(probe)
    talker = rclpy.create_node("talker", context=dds.context)
    publisher = talker.create_publisher(String, "ping", 10)
    try:
        assert wait_for(lambda: publisher.get_subscription_count() > 0, 10.0)
        publisher.publish(String(data="hello"))
        assert wait_for(lambda: heard, 10.0)
    finally:
        talker.destroy_node()
    return heard


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
@pytest.mark.parametrize("before", [None, "SUBNET"])
def test_teardown_in_order_and_environment_restored(monkeypatch, error, before):
    if before is None:
        monkeypatch.delenv(RANGE, raising=False)
    else:
        monkeypatch.setenv(RANGE, before)
    with pytest.raises(error):
        with PrivateDomain(DOMAIN) as dds:
            children = dds.children = _Children(dds)
            assert dds.env["ROS_DOMAIN_ID"] == str(DOMAIN) and dds.env[RANGE] == "LOCALHOST"
            assert os.environ[RANGE] == "LOCALHOST"  # for the probe's participant
            assert dds.context.get_domain_id() == DOMAIN
            assert _spin_until_heard(dds) == ["hello"]
            raise error("a child failed")
    assert children.stopped_with == {"context_ok": True, "spinning": True, "range": "LOCALHOST"}
    assert not dds.spinner.is_alive()
    assert not dds.context.ok()
    with pytest.raises(Exception, match="destruction was requested"):
        dds.probe.get_node_names()
    assert os.environ.get(RANGE) == before


def test_a_spin_target_of_its_own_and_a_clean_exit(monkeypatch):
    monkeypatch.setenv(RANGE, "SUBNET")
    ran = []

    def target():
        ran.append(True)
        try:
            dds.executor.spin()
        except ExternalShutdownException:
            pass

    with PrivateDomain(DOMAIN, spin_join_timeout_s=2.0) as dds:
        import rclpy

        dds.spin(rclpy.create_node("probe", context=dds.context), target=target, name="my_probe")
        assert dds.spinner.name == "my_probe"
        assert wait_for(lambda: ran, 5.0)
    assert not dds.spinner.is_alive() and not dds.context.ok()
    assert os.environ[RANGE] == "SUBNET"


def test_environment_restored_when_the_context_cannot_start(monkeypatch):
    monkeypatch.delenv(RANGE, raising=False)
    with pytest.raises(Exception):  # noqa: B017 - rclpy's own error for a domain id out of range
        with PrivateDomain(-5):
            pass
    assert RANGE not in os.environ
