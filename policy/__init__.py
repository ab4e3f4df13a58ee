"""The ACT-style transformer policy: tokens, attention, model, normalizer, checkpoints,
FLOP accounting. No ROS and no PyBullet imports (ARCHITECTURE.md)."""

from policy.checkpoint import CheckpointError, load_checkpoint, read_config, save_checkpoint
from policy.config import PolicyConfig
from policy.model import ACTPolicy, PolicyOutput, TokenLayout
from policy.normalizer import Normalizer
from policy.tokens import images_to_tensor, stack_camera_images
from policy.vocab import InstructionTokenizer, default_vocab

__all__ = [
    "ACTPolicy", "CheckpointError", "InstructionTokenizer", "Normalizer", "PolicyConfig",
    "PolicyOutput", "TokenLayout", "default_vocab", "images_to_tensor", "load_checkpoint",
    "read_config", "save_checkpoint", "stack_camera_images",
]
