"""The node executables' DDS transport choice (arm_act/ros/transport.py): UDP over loopback
instead of rmw_fastrtps's shared memory, only where the environment asked for LOCALHOST
discovery and left Fast DDS's configuration to us. tests/test_realtime.py checks over DDS
that a node started as `ros2 run` starts it has no shared-memory threads."""
from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arm_act.ros.transport import PROFILE, SWITCH, apply_transport, loopback_udp_applies, transport_choice

pytestmark = pytest.mark.unit

LOCAL = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}


def test_localhost_becomes_the_udp_loopback_profile():
    env = dict(LOCAL)
    assert apply_transport(env)
    assert env == {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT", "FASTDDS_DEFAULT_PROFILES_FILE": str(PROFILE)}


@pytest.mark.parametrize("extra", [
    {SWITCH: "shm"},
    {"ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET"},
    {"ROS_AUTOMATIC_DISCOVERY_RANGE": "OFF"},
    {"RMW_IMPLEMENTATION": "rmw_cyclonedds_cpp"},
    {"FASTDDS_DEFAULT_PROFILES_FILE": "/etc/my_profile.xml"},
    {"FASTRTPS_DEFAULT_PROFILES_FILE": "/etc/my_profile.xml"},
    {"ROS_STATIC_PEERS": "192.168.1.7"},
])
def test_what_the_user_set_is_left_alone(extra):
    env = {**LOCAL, **extra}
    assert not apply_transport(env)
    assert env == {**LOCAL, **extra}


def test_without_its_profile_file_it_keeps_rmws_localhost(monkeypatch, tmp_path):
    monkeypatch.setattr("arm_act.ros.transport.PROFILE", tmp_path / "missing.xml")
    env = dict(LOCAL)
    assert not apply_transport(env) and env == LOCAL


def test_the_switch_takes_udp_or_shm_and_refuses_anything_else():
    assert transport_choice({}) == "udp" and transport_choice({SWITCH: " SHM "}) == "shm"
    with pytest.raises(ValueError, match="ARM_ACT_DDS_TRANSPORT='tcp' must be one of udp, shm"):
        apply_transport({**LOCAL, SWITCH: "tcp"})


def test_the_profile_is_udp_only_with_unicast_discovery_on_loopback():
    ns = {"d": "http://www.eprosima.com"}
    root = ET.parse(PROFILE).getroot()
    assert [t.text for t in root.iterfind(".//d:transport_descriptor/d:type", ns)] == ["UDPv4"]
    participant = root.find(".//d:participant", ns)
    assert participant.get("is_default_profile") == "true"
    assert participant.find("d:rtps/d:useBuiltinTransports", ns).text == "false"
    assert [a.text for a in participant.iterfind(".//d:initialPeersList//d:address", ns)] == ["127.0.0.1"]
    assert participant.find(".//d:metatrafficMulticastLocatorList", ns) is None


ENV_KEYS = ["ROS_AUTOMATIC_DISCOVERY_RANGE", "RMW_IMPLEMENTATION", "FASTDDS_DEFAULT_PROFILES_FILE",
            "ROS_STATIC_PEERS", SWITCH, "HOME"]
VALUES = st.sampled_from(["", "LOCALHOST", "localhost", "SUBNET", "rmw_fastrtps_cpp", "rmw_zenoh_cpp",
                          "udp", "shm", "/x.xml", "10.0.0.1"])


@given(st.dictionaries(st.sampled_from(ENV_KEYS), VALUES))
def test_it_changes_two_variables_or_none(env):
    before = dict(env)
    if env.get(SWITCH, "udp").strip().lower() not in ("", "udp", "shm"):
        with pytest.raises(ValueError):
            apply_transport(env)
        return
    applied = apply_transport(env)
    assert applied == loopback_udp_applies(before)
    changed = {k for k in set(env) | set(before) if env.get(k) != before.get(k)}
    if applied:
        assert before["ROS_AUTOMATIC_DISCOVERY_RANGE"].upper() == "LOCALHOST"
        assert changed == {"ROS_AUTOMATIC_DISCOVERY_RANGE", "FASTDDS_DEFAULT_PROFILES_FILE"}
    else:
        assert not changed
