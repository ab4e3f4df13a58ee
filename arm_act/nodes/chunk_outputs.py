"""What policy_node publishes per chunk: the chunk itself (policy/action_chunk) and, for
viewers, the action queries' and the instruction's attention over each camera's patches."""
from __future__ import annotations

from std_msgs.msg import Float32MultiArray
from trajectory_msgs.msg import JointTrajectory

from arm_act.ros import conversions as conv


class ChunkOutputs:
    """The per-chunk publishers of one node. `policy/attention` (Float32MultiArray, dims camera
    x row x col) is the action queries' mean cross-attention; `policy/instruction_attention`
    the instruction's words' self-attention over the same patches, averaged over layers."""

    def __init__(self, node, control_rate: int):
        self.period = 1.0 / control_rate
        self.chunk = node.create_publisher(JointTrajectory, "policy/action_chunk", 10)
        self.attention = node.create_publisher(Float32MultiArray, "policy/attention", 10)
        self.words = node.create_publisher(Float32MultiArray, "policy/instruction_attention", 10)

    def publish(self, stamp_ns: int, pred, cameras: tuple[str, ...]) -> None:
        """The chunk of the camera pair stamped `stamp_ns`, and its attention maps if the
        inference computed them (policy_node's `publish_attention`)."""
        self.chunk.publish(conv.action_chunk_msg(stamp_ns * 1e-9, pred.actions, self.period))
        if pred.attention is not None:
            self.attention.publish(conv.attention_msg(pred.attention, cameras))
        if pred.instruction_attention is not None:
            self.words.publish(conv.attention_msg(pred.instruction_attention, cameras))
