"""sim_node's new instructions while an episode runs, without ROS: the `task` callback puts
each text here (the executor thread), and the sim_loop thread applies them to the world at
the next control tick (ArmEnv.change_goal), where the env is safe to touch.

A text is applied only in the episode it arrived in: one that arrives between episodes, or
during an episode that ends before its next control tick, is dropped with a log line. The
running instruction again is no change.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

MAX_TASK_CHARS = 500
"""Longer texts are refused unread (no instruction is that long; the log line stays short)."""
MAX_PENDING = 16
"""Texts waiting for the next control tick beyond this many: the oldest are dropped."""


@dataclass(frozen=True)
class Outcome:
    """What one text did: "changed" (the goal is the new one), "same" (the running
    instruction again), "refused" (reason says why; the goal stays) or "dropped" (no
    episode running when it arrived)."""

    text: str
    kind: str
    reason: str = ""


class GoalInbox:
    """Texts from `task`, tagged with the episode they arrived in (-1: none running)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[tuple[int, str]] = []
        self.refused = 0
        self.last_refusal = ""

    def put(self, text: str, episode: int) -> None:
        with self._lock:
            self._pending.append((episode, text))
            del self._pending[:-MAX_PENDING]

    def apply(self, env, episode: int) -> list[Outcome]:
        """Apply the texts that arrived during `episode` to env (its running episode), in
        order; the others are dropped. Called from the thread that steps env."""
        with self._lock:
            pending, self._pending = self._pending, []
        outcomes = []
        for arrived_in, text in pending:
            if arrived_in != episode:
                outcomes.append(Outcome(text, "dropped", "no episode was running when it arrived"))
                continue
            if len(text) > MAX_TASK_CHARS:
                outcome = Outcome(text, "refused", f"over {MAX_TASK_CHARS} characters")
            else:
                before = len(env.goal_changes)
                result = env.change_goal(text)
                if len(env.goal_changes) > before:
                    outcome = Outcome(text, "changed")
                elif getattr(result, "reason", None) is not None:
                    outcome = Outcome(text, "refused", result.reason)
                else:
                    outcome = Outcome(text, "same")
            if outcome.kind == "refused":
                self.refused += 1
                self.last_refusal = f"{text[:80]!r}: {outcome.reason}"
            outcomes.append(outcome)
        return outcomes
