"""The task as a Gymnasium environment (`gymnasium.make("arm_act/PickPlace-v0")` once this
package is imported, or `gymnasium.make("arm_act.gym:arm_act/PickPlace-v0")` without the
import), and drivers that run the scripted expert and a checkpoint through it.

Layer: like eval/bench/data, it may import sim, policy, common and eval, never cli.
"""
import gymnasium

from arm_act.gym.env import ENV_ID, PickPlaceEnv

if ENV_ID not in gymnasium.registry:
    gymnasium.register(ENV_ID, entry_point="arm_act.gym.env:PickPlaceEnv", disable_env_checker=True)

__all__ = ["ENV_ID", "PickPlaceEnv"]
