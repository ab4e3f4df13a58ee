"""The word vocabulary of every task family's training phrasings.

arm_act.policy.vocab.default_vocab() is the one-template vocabulary the shipped checkpoint's
embedding table was trained with; family_vocab() extends it (its words keep their ids, the
new words come after them), so a checkpoint can grow into the larger table. The phrasings
themselves are arm_act.sim.instructions' (pure Python, no PyBullet).
"""
from __future__ import annotations

from arm_act.policy.vocab import build_vocab, default_vocab
from arm_act.sim.instructions import FUNCTION_WORDS, all_goals, instructions_for, parse_goal, training_sentences

__all__ = ["FUNCTION_WORDS", "family_vocab", "longest_instruction", "training_phrasings_of"]


def family_vocab() -> tuple[str, ...]:
    """default_vocab()'s words with their ids, then every other word of the training
    sentences of all families (sim.instructions.training_sentences), in first appearance.
    Held-out phrasings may use words outside it: the tokenizer maps those to <unk>."""
    old = default_vocab()
    vocab = build_vocab(training_sentences())  # box's canonical sentences come first
    if vocab[: len(old)] != old:
        raise AssertionError(f"family vocabulary {vocab} does not extend the default one {old}")
    return vocab


def longest_instruction(held_out: bool = True) -> int:
    """Words in the longest sentence of every family's training (and held-out) phrasings:
    a token budget that holds every one of them."""
    sets = (False, True) if held_out else (False,)
    return max(len(text.split()) for goal in all_goals() for h in sets for text in instructions_for(goal, h))



def training_phrasings_of(instruction: str) -> tuple[str, ...]:
    """Every training sentence that asks for the instruction's goal (the instruction's own
    first when it is one of them); () when it gives no goal."""
    goal = parse_goal(instruction)
    if not goal:
        return ()
    return instructions_for(goal)
