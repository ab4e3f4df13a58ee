"""The ACT-style transformer policy: tokens, attention, model, normalizer, checkpoints,
FLOP accounting. No ROS and no PyBullet imports (docs/architecture.md, "Layers")."""

from arm_act.policy.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from arm_act.policy.config import PolicyConfig
from arm_act.policy.model import ACTPolicy, PolicyOutput, TokenLayout
from arm_act.policy.normalizer import Normalizer
from arm_act.policy.tokens import images_to_tensor, stack_camera_images
from arm_act.policy.vocab import InstructionTokenizer, default_vocab

__all__ = [
    "ACTPolicy", "CheckpointError", "InstructionTokenizer", "Normalizer", "PolicyConfig",
    "PolicyOutput", "TokenLayout", "default_vocab", "images_to_tensor", "load_checkpoint",
    "read_config", "save_checkpoint", "stack_camera_images",
]
