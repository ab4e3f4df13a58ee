"""Task families, their goals, the phrasings of their instructions and a parser back to a goal.

Pure Python (no numpy, no PyBullet), so the parser runs anywhere: arm_act.sim's package
imports its heavy modules lazily, and importing this module loads none of them.

    Goal("box", "red")                             "put the red block in the box"
    Goal("stack", "red", "blue")                   "stack the red block on the blue block"
    Goal("relation", "red", "blue", "left")        "put the red block left of the blue block"

`colour` is always the block that moves (the named block), `reference` the block it is
placed on or beside. Relations are as a user looking through the front camera says them
(docs/tasks.md): left/right of the reference in that image, in front of (nearer the
camera) or behind it.

Phrasings: training_phrasings(family) are the templates training may use (the first is the
canonical one, Goal.instruction), held_out_phrasings(family) ones it must never see, so an
evaluation can ask whether a policy follows words it was not trained on. parse_goal(text,
colours) turns any of them (and other word orders) back into the goal, or gives a Refusal
whose one-line reason names the problem.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COLOURS = ("red", "green", "blue", "yellow", "purple", "orange")
FAMILIES = ("box", "stack", "relation")
TASKS = (*FAMILIES, "mix")
"""What a run's `task` selector may be: one family, or mix (the family drawn per episode)."""
RELATIONS = ("left", "right", "front", "behind")
RELATION_PHRASES = {"left": "left of", "right": "right of", "front": "in front of", "behind": "behind"}
"""The canonical words of each relation in an instruction."""


@dataclass(frozen=True)
class Goal:
    """What an episode asks for. family: box | stack | relation; colour: the block to move;
    reference: the block it goes on or beside (stack, relation); relation: left | right |
    front | behind (relation only)."""

    family: str
    colour: str
    reference: str | None = None
    relation: str | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family={self.family!r} must be one of {FAMILIES}")
        if self.colour not in COLOURS:
            raise ValueError(f"colour={self.colour!r} must be one of {COLOURS}")
        if self.family == "box":
            if self.reference is not None or self.relation is not None:
                raise ValueError("a box goal has no reference block and no relation")
            return
        if self.reference not in COLOURS or self.reference == self.colour:
            raise ValueError(f"reference={self.reference!r} must be a colour other than {self.colour!r}")
        if self.family == "stack" and self.relation is not None:
            raise ValueError("a stack goal has no relation")
        if self.family == "relation" and self.relation not in RELATIONS:
            raise ValueError(f"relation={self.relation!r} must be one of {RELATIONS}")

    @property
    def instruction(self) -> str:
        """The canonical instruction (for box exactly the one-template sentence of before)."""
        return fill(training_phrasings(self.family)[0], self)

    @property
    def colours(self) -> tuple[str, ...]:
        """The colours the goal names (the moved block first)."""
        return (self.colour,) if self.reference is None else (self.colour, self.reference)

    def to_dict(self) -> dict:
        """JSON-ready; None fields dropped (a box goal is {"family": "box", "colour": ...})."""
        out = {"family": self.family, "colour": self.colour}
        if self.reference is not None:
            out["reference"] = self.reference
        if self.relation is not None:
            out["relation"] = self.relation
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Goal:
        return cls(data["family"], data["colour"], data.get("reference"), data.get("relation"))


# Templates: {c} the moved block's colour, {r} the reference's, {rel} the relation's words.
_TRAINING = {
    "box": (
        "put the {c} block in the box",
        "place the {c} block in the box",
        "put the {c} one in the box",
        "drop the {c} block into the box",
        "move the {c} block into the box",
    ),
    "stack": (
        "stack the {c} block on the {r} block",
        "put the {c} block on the {r} block",
        "place the {c} block onto the {r} block",
        "put the {c} one on top of the {r} one",
        "stack the {c} block on top of the {r} block",
    ),
    "relation": (
        "put the {c} block {rel} the {r} block",
        "place the {c} block {rel} the {r} block",
        "move the {c} one {rel} the {r} one",
        "put the {c} block {rel} the {r} one",
    ),
}
_HELD_OUT = {
    "box": (
        "pick up the {c} block and put it in the box",
        "the {c} block goes into the box",
        "into the box put the {c} one",
    ),
    "stack": (
        "set the {c} block on top of the {r} one",
        "on the {r} block stack the {c} one",
        "pick up the {c} block and put it onto the {r} block",
    ),
    "relation": (
        "set the {c} block {rel} the {r} one",
        "{rel} the {r} block put the {c} block",
        "pick up the {c} block and put it {rel} the {r} block",
    ),
}
_RELATION_WORDS_TRAINING = {"left": ("left of", "to the left of"), "right": ("right of", "to the right of"),
                            "front": ("in front of",), "behind": ("behind",)}
_RELATION_WORDS_HELD_OUT = {"left": ("on the left of",), "right": ("on the right of",),
                            "front": ("just in front of",), "behind": ("just behind",)}


def training_phrasings(family: str) -> tuple[str, ...]:
    """The instruction templates of a family that training may use; the first is canonical."""
    return _TRAINING[_family(family)]


def held_out_phrasings(family: str) -> tuple[str, ...]:
    """Templates of a family never used in training (for evaluating unseen wording)."""
    return _HELD_OUT[_family(family)]


def _family(family: str) -> str:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} must be one of {FAMILIES}")
    return family


def fill(template: str, goal: Goal, relation_words: str | None = None) -> str:
    """A template filled with a goal (the relation's canonical words unless given)."""
    rel = relation_words if relation_words is not None else RELATION_PHRASES.get(goal.relation or "", "")
    return template.format(c=goal.colour, r=goal.reference or "", rel=rel)


def instructions_for(goal: Goal, held_out: bool = False) -> tuple[str, ...]:
    """Every sentence of the training (or held-out) set that asks for this goal. Held-out
    sentences are the held-out templates with any relation words, plus the training
    templates with the held-out relation words: none of them is a training sentence."""
    templates = held_out_phrasings(goal.family) if held_out else training_phrasings(goal.family)
    if goal.family != "relation":
        return tuple(fill(t, goal) for t in templates)
    training_words = _RELATION_WORDS_TRAINING[goal.relation]
    if not held_out:
        return tuple(fill(t, goal, w) for t in templates for w in training_words)
    words = training_words + _RELATION_WORDS_HELD_OUT[goal.relation]
    out = [fill(t, goal, w) for t in templates for w in words]
    out += [fill(t, goal, w) for t in training_phrasings("relation") for w in _RELATION_WORDS_HELD_OUT[goal.relation]]
    return tuple(out)


def all_goals(colours: Sequence[str] = COLOURS) -> list[Goal]:
    """Every goal over these colours, family by family."""
    goals = [Goal("box", c) for c in colours]
    goals += [Goal("stack", c, r) for c in colours for r in colours if r != c]
    goals += [Goal("relation", c, r, rel) for c in colours for r in colours if r != c for rel in RELATIONS]
    return goals


def training_sentences() -> list[str]:
    """Every training sentence of every family, box's canonical sentences first, then in
    a fixed order (the larger vocabulary is built from them)."""
    out = [Goal("box", c).instruction for c in COLOURS]
    for goal in all_goals():
        out += instructions_for(goal)
    return out


# --- parsing ---------------------------------------------------------------------------
_FILLER = frozenset({"the", "a", "an", "block", "one", "cube", "put", "place", "move", "drop", "set", "pick", "up",
                     "and", "it", "goes", "go", "please", "just", "to", "of", "in", "into", "inside", "stack"})
_BOX = frozenset({"box"})
_ON = frozenset({"on", "onto", "top"})
_RELATION_WORD = {"left": "left", "right": "right", "front": "front", "behind": "behind"}
KNOWN_WORDS = frozenset(_FILLER | _BOX | _ON | set(_RELATION_WORD) | set(COLOURS))
FUNCTION_WORDS = frozenset(_FILLER - {"stack"})
"""Words that name no colour, family, place or relation: the parser skips them ("stack"
names the stack family), so a sentence asks for the same goal with any of them unread."""
_PUNCTUATION = ".,!?;:"


@dataclass(frozen=True)
class Refusal:
    """Why an instruction does not give a goal (one line)."""

    reason: str

    def __bool__(self) -> bool:  # `if parse_goal(...)` reads as "did it parse"
        return False


def normalised_words(text: str) -> list[str]:
    """The words the parser reads: lower case, split on whitespace, each word's surrounding
    punctuation dropped ("Put the red block in the box." -> put the red block in the box)."""
    words = [w.strip(_PUNCTUATION) for w in text.lower().split()]
    return [w for w in words if w]


def parse_goal(text: object, colours: Iterable[str] | None = None) -> Goal | Refusal:
    """An instruction -> its Goal, or a Refusal naming the problem: not text, empty, an
    unknown word, no colour, a colour twice, too many colours, a colour not on the table
    (`colours`: the colours of the blocks there; None skips that check), no place to put
    the block, or places of two families. Case, surrounding whitespace and trailing
    punctuation are ignored. The reference block is the colour after the first word of
    place ("on", "onto", "top", "left", "right", "front", "behind"), so word order is free."""
    if not isinstance(text, str):
        kind = "NaN" if isinstance(text, float) and math.isnan(text) else type(text).__name__
        return Refusal(f"the instruction must be text, got {kind}")
    words = normalised_words(text)
    if not words:
        return Refusal("the instruction is empty")
    for word in words:
        if word not in KNOWN_WORDS:
            return Refusal(f"unknown word {word!r}")
    named = [w for w in words if w in COLOURS]
    if not named:
        return Refusal(f"no colour named (one of {', '.join(COLOURS)})")
    if len(set(named)) < len(named):
        twice = next(c for c in named if named.count(c) > 1)
        return Refusal(f"the colour {twice!r} is named twice")
    if len(named) > 2:
        return Refusal(f"{len(named)} colours named ({', '.join(named)}); at most two")
    relations = sorted({_RELATION_WORD[w] for w in words if w in _RELATION_WORD})
    if len(relations) > 1:
        return Refusal(f"two relations named ({' and '.join(relations)})")
    has_box = any(w in _BOX for w in words)
    has_on = any(w in _ON for w in words) and not relations  # "on the left of" is a relation
    families = set()
    if has_box:
        families.add("box")
    if has_on or "stack" in words:
        families.add("stack")
    if relations:
        families.add("relation")
    if not families:
        return Refusal("no place for the block (in the box, on a block, or left of / right of / "
                       "in front of / behind a block)")
    if len(families) > 1:
        return Refusal(f"places of two tasks named ({' and '.join(sorted(families))})")
    (family,) = families
    if family == "box":
        if len(named) != 1:
            return Refusal(f"the box task names one colour, got {' and '.join(named)}")
        goal = Goal("box", named[0])
    else:
        if len(named) != 2:
            return Refusal(f"the {family} task names two colours (the block and the one it goes "
                           f"{'on' if family == 'stack' else 'beside'}), got {named[0]}")
        markers = _ON | set(_RELATION_WORD)
        first_marker = next((i for i, w in enumerate(words) if w in markers), None)
        if first_marker is None:  # "stack the red block ... blue": which one goes on which?
            return Refusal("no 'on' or 'onto' before the block to stack it on")
        after = [w for w in words[first_marker:] if w in COLOURS]
        if not after:
            return Refusal(f"no colour after {words[first_marker]!r} (the block to put it "
                           f"{'on' if family == 'stack' else 'beside'})")
        reference = after[0]
        colour = named[0] if named[1] == reference else named[1]
        goal = Goal(family, colour, reference, relations[0] if relations else None)
    if colours is not None:
        table = set(colours)
        for colour in goal.colours:
            if colour not in table:
                return Refusal(f"no {colour} block on the table (it has {', '.join(sorted(table)) or 'no blocks'})")
    return goal


def parse_goal_or_raise(text: object, colours: Iterable[str] | None = None) -> Goal:
    """parse_goal, raising ValueError("instruction ...: <reason>") on a refusal."""
    result = parse_goal(text, colours)
    if isinstance(result, Refusal):
        raise ValueError(f"instruction {text!r} refused: {result.reason}")
    return result


def task_stream_rng_words(episode_seed: int) -> list[int]:
    """The seed words of the generator an episode's goal is drawn from (sim.task.draw_goal):
    a stream of its own, so the layout drawn from the episode seed stays as it was."""
    return [int(episode_seed), TASK_STREAM]


TASK_STREAM = 43
"""Second word of the goal stream's seed (the block count uses 7, world perturbations 31)."""

PHRASINGS = ("canonical", "training", "held-out")
"""Which words an episode's goal is given in: the canonical sentence (Goal.instruction), one
of the training sentences, or one of the held-out ones (phrase())."""
PHRASING_STREAM = 47


def phrase(goal: Goal, phrasing: str, episode_seed: int) -> str:
    """The episode's instruction for its goal: canonical, or a sentence of the training or
    held-out set drawn from a stream of its own ([episode_seed, PHRASING_STREAM]), so the
    layout and the goal are the same whatever the words."""
    if phrasing not in PHRASINGS:
        raise ValueError(f"phrasing={phrasing!r} must be one of {', '.join(PHRASINGS)}")
    if phrasing == "canonical":
        return goal.instruction
    import random  # no numpy here (module docstring); the draw only has to be repeatable

    sentences = instructions_for(goal, held_out=phrasing == "held-out")
    return random.Random(f"{int(episode_seed)}/{PHRASING_STREAM}").choice(sentences)
