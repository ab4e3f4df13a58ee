"""A goal change scheduled inside an in-process episode (`arm-act eval --change-goal AT_S:TO`).

Over ROS a user changes the goal by publishing a new instruction on `task`; in process an
ArmEnv built with a GoalChange does the same at a fixed sim time, so the change can be
measured over many seeded episodes. `to` is a family, and the new goal is drawn from the
episode's layout and its goal at the time of the change:

    box        another block into the box (any colour but the named block's)
    stack      the named block onto another block
    relation   the named block beside another block, on a side it is not on yet

or the words of any instruction (parsed against the blocks on the table). The draws come
from default_rng([episode_seed, GOAL_CHANGE_STREAM]), a stream of their own: the layout and
the first goal are the same as without the change.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from arm_act.sim.instructions import FAMILIES, RELATIONS, Goal, parse_goal

GOAL_CHANGE_STREAM = 53
"""Second word of the goal change's seed (the goal uses 43, the phrasing 47)."""


@dataclass(frozen=True)
class GoalChange:
    """At `at` s of sim time after reset, the goal becomes `to` (module docstring)."""

    at: float
    to: str

    def __post_init__(self) -> None:
        if not (isinstance(self.at, (int, float)) and math.isfinite(self.at) and self.at >= 0):
            raise ValueError(f"goal change time {self.at!r} must be a finite number of seconds >= 0")
        to = str(self.to).strip()
        if not to:
            raise ValueError("goal change: no family or instruction after the time")
        if to not in FAMILIES:
            parsed = parse_goal(to)
            if not isinstance(parsed, Goal):
                raise ValueError(f"goal change {to!r} is neither a family ({', '.join(FAMILIES)}) nor an "
                                 f"instruction: {parsed.reason}")
        object.__setattr__(self, "to", to)

    @classmethod
    def parse(cls, text: str) -> GoalChange:
        """"AT_S:TO" (e.g. "3.0:stack", "2:put the blue block in the box") -> GoalChange."""
        at, sep, to = str(text).partition(":")
        if not sep:
            raise ValueError(f"goal change {text!r} is not AT_S:TO (e.g. 3.0:stack)")
        try:
            seconds = float(at)
        except ValueError:
            raise ValueError(f"goal change {text!r}: {at!r} is not a time in seconds") from None
        return cls(seconds, to)

    @classmethod
    def optional(cls, text: str | None) -> GoalChange | None:
        """parse(text), None for None: a config's `change_goal` field."""
        return None if text is None else cls.parse(text)

    def __str__(self) -> str:
        return f"{self.at:g}:{self.to}"

    def instruction(self, goal: Goal, positions: dict[str, np.ndarray], episode_seed: int) -> str | None:
        """The new instruction for an episode whose goal is `goal` at the change, its blocks
        at `positions` ({colour: xy}); None when the layout has no such goal (one block)."""
        if self.to not in FAMILIES:
            return self.to
        rng = np.random.default_rng([int(episode_seed), GOAL_CHANGE_STREAM])
        others = [c for c in positions if c != goal.colour]
        if not others:
            return None
        order = [others[i] for i in rng.permutation(len(others))]
        if self.to == "box":
            return Goal("box", order[0]).instruction
        if self.to == "stack":
            # Another reference if the goal already stacks on the first drawn one.
            reference = next((c for c in order if c != goal.reference), order[0])
            return Goal("stack", goal.colour, reference).instruction
        from arm_act.sim.task import in_relation_zone

        relations = [RELATIONS[i] for i in rng.permutation(len(RELATIONS))]
        for reference in order:
            for relation in relations:
                if not in_relation_zone(positions[goal.colour], positions[reference], relation):
                    return Goal("relation", goal.colour, reference, relation).instruction
        return None
