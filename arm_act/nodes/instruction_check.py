"""Whether policy_node may act on an instruction: the words it gives the network, or the
one-line reason it refuses them.

The network is conditioned on the instruction's tokens; a word its checkpoint never saw
becomes <unk>, and a goal of a family it was not trained on, or a colour that is not on the
table, gives it nothing to aim at. Acting on such an instruction would be acting on a guess,
so policy_node holds the arm instead, logs the reason once and reports it in
policy/diagnostics (`instruction_refused`). The checks, in order:

- the parser (arm_act.sim.instructions.parse_goal) gives a goal: known words, one or two
  colours, one place; where the `episode` message states the colours of the blocks on the
  table (EpisodeInfo.colours; sim_node does), each named colour must be one of them;
- the goal's family is one the checkpoint knows: every word of the family's canonical
  sentence is in its vocabulary (the shipped box-only checkpoint knows box);
- every word is in the checkpoint's vocabulary and fits its instruction tokens.

What the network reads is the normalised sentence (lower case, punctuation dropped), so
"Put the red block in the box." acts like the canonical sentence.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from arm_act.sim.instructions import FAMILIES, RELATIONS, Goal, normalised_words, parse_goal

_EXAMPLE_COLOURS = ("red", "blue")  # any two colours: a family's words do not depend on them


def known_families(vocab: Sequence[str]) -> tuple[str, ...]:
    """The families whose canonical sentences (every relation's, for relation) use only words
    of `vocab`: those a checkpoint with this vocabulary was trained on. Other phrasings are
    checked word by word."""
    words = set(vocab)
    out = []
    for family in FAMILIES:
        relations = RELATIONS if family == "relation" else (None,)
        goals = [Goal("box", _EXAMPLE_COLOURS[0]) if family == "box" else Goal(family, *_EXAMPLE_COLOURS, relation=r)
                 for r in relations]
        if all(set(normalised_words(goal.instruction)) <= words for goal in goals):
            out.append(family)
    return tuple(out)


class InstructionCheck:
    """The verdict on instructions for one checkpoint (vocabulary and token budget); the
    last verdict is kept, so checking the same instruction and table every tick is free."""

    def __init__(self, vocab: Sequence[str], max_tokens: int):
        self.vocab = frozenset(vocab)
        self.max_tokens = int(max_tokens)
        self.families = known_families(vocab)
        self._last: tuple[tuple, tuple[str, str]] | None = None

    def verdict(self, text: str, colours: Iterable[str] | None) -> tuple[str, str]:
        """(the sentence to give the network, "") or ("", the reason to refuse it).
        colours: the colours of the blocks on the table, or None when unknown (not checked)."""
        key = (text, None if colours is None else tuple(sorted(colours)))
        if self._last is None or self._last[0] != key:
            self._last = (key, self._decide(text, key[1]))
        return self._last[1]

    def _decide(self, text: str, colours: tuple[str, ...] | None) -> tuple[str, str]:
        goal = parse_goal(text, colours)
        if not goal:
            return "", goal.reason
        if goal.family not in self.families:
            return "", (f"the policy was not trained on the {goal.family} task "
                        f"(it knows: {', '.join(self.families) or 'none'})")
        words = normalised_words(text)
        unknown = [w for w in words if w not in self.vocab]
        if unknown:
            return "", f"the policy was not trained on the word {unknown[0]!r}"
        if len(words) > self.max_tokens:
            return "", f"{len(words)} words; the policy reads at most {self.max_tokens}"
        return " ".join(words), ""


class RefusalLog:
    """The node's side of refusals: the reason of the running instruction ("" when it is
    readable), logged and counted once per new reason, not once per tick."""

    def __init__(self, logger, stats):
        self.logger, self.stats = logger, stats
        self.reason = ""

    def words(self, check: InstructionCheck | None, instruction: str | None, colours) -> str | None:
        """The instruction's words for the network, or None (no checkpoint or instruction
        yet, or refused)."""
        if instruction is None or check is None:
            return None
        words, reason = check.verdict(instruction, colours)
        if reason and reason != self.reason:
            self.stats["refused_instructions"] += 1
            self.logger.error(f"refusing the instruction {instruction!r}: {reason}; the arm holds")
        self.reason = reason
        return words or None
