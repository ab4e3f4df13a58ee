"""ros_args: the command line the node processes get. rcl reads each `-p key:=value` as YAML,
so a string that YAML reads as a number or bool must arrive quoted (`arm-act demo --blocks 6`)."""
from __future__ import annotations

import pytest
from rclpy.exceptions import InvalidParameterTypeException

from arm_act.common.processes import ros_args

pytestmark = pytest.mark.ros

STRINGS = ["6", "2-5", "true", "1e3", "null", "it's", ""]


@pytest.mark.parametrize("quote", [True, False])
def test_string_parameters_arrive_as_strings(quote):
    import rclpy
    from rclpy.node import Node

    params = {f"p{i}": s for i, s in enumerate(STRINGS)}
    args = ros_args({**params, "seed": 3, "gui": False})
    if not quote:  # what ros_args did before: the bare value
        args = ["--ros-args", *[a for k, v in params.items() if v for a in ("-p", f"{k}:={v}")]]
    context = rclpy.Context()
    rclpy.init(args=args, context=context, domain_id=231)
    try:
        node = Node("ros_args_probe", context=context)
        try:
            if not quote:
                with pytest.raises(InvalidParameterTypeException):
                    node.declare_parameter("p0", "default")
                return
            got = {k: node.declare_parameter(k, "default").value for k in params}
            assert got == params
            assert node.declare_parameter("seed", 0).value == 3
            assert node.declare_parameter("gui", True).value is False
        finally:
            node.destroy_node()
    finally:
        rclpy.shutdown(context=context)
