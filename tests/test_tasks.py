"""Task families (box, stack, relation): seeding, success rules on constructed states, the
scripted expert per family, and the instruction phrasings and parser (sim.instructions)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from arm_act.sim import ArmEnv, SimConfig, perturbation_rng
from arm_act.sim.instructions import (
    COLOURS,
    FAMILIES,
    KNOWN_WORDS,
    RELATIONS,
    Goal,
    Refusal,
    all_goals,
    held_out_phrasings,
    instructions_for,
    parse_goal,
    parse_goal_or_raise,
    training_phrasings,
    training_sentences,
)
from arm_act.sim.rollout import ExpertAgent, run_episode
from arm_act.sim.task import RELATION_DIRECTIONS, in_relation_zone

pytestmark = pytest.mark.unit

CFG = SimConfig()
S = CFG.block_size


@pytest.fixture(scope="module")
def envs():
    made = {task: ArmEnv(CFG, task=task) for task in ("box", "stack", "relation", "mix")}
    yield made
    for env in made.values():
        env.close()


def _layout(env):
    return [(o.name, o.position.round(9).tolist(), o.orientation.round(9).tolist())
            for o in env.objects()]


# --- seeding ---------------------------------------------------------------------------
@pytest.mark.parametrize("seed,n", [(0, 2), (3, 4), (17, 6)])
def test_every_task_draws_the_same_layout_and_box_the_same_instruction(envs, seed, n):
    plain = ArmEnv(CFG)
    try:
        plain.reset(seed, n)
        layouts = {}
        for task, env in envs.items():
            env.reset(seed, n)
            layouts[task] = _layout(env)
            assert env.target_colour == plain.target_colour  # the named block is the layout's
        assert all(layout == _layout(plain) for layout in layouts.values())
        assert envs["box"].instruction == plain.instruction == f"put the {plain.target_colour} block in the box"
        assert envs["box"].goal == plain.goal == Goal("box", plain.target_colour)
    finally:
        plain.close()


def test_goals_depend_on_the_seed_only_and_mix_draws_every_family(envs):
    env = envs["mix"]
    families = set()
    for seed in range(30):
        env.reset(seed, 3)
        first = env.goal
        env.reset(seed, 3)
        assert env.goal == first
        families.add(first.family)
        colours = {o.colour for o in env.objects() if o.kind == "block"}
        assert set(first.colours) <= colours and parse_goal(env.instruction, colours) == first
        assert env.status() == "running"  # no goal is done before the arm moves
    assert families == set(FAMILIES)


def test_phrasing_draws_the_words_and_keeps_the_layout_and_goal(envs):
    from arm_act.sim.instructions import phrase

    env = ArmEnv(CFG, task="mix", phrasing="held-out")
    try:
        seen = set()
        for seed in range(12):
            env.reset(seed, 3)
            envs["mix"].reset(seed, 3)
            assert _layout(env) == _layout(envs["mix"]) and env.goal == envs["mix"].goal
            assert env.instruction in instructions_for(env.goal, held_out=True)
            assert env.instruction == phrase(env.goal, "held-out", seed)  # repeatable
            assert parse_goal(env.instruction) == env.goal
            seen.add(env.instruction)
        assert len(seen) == 12  # other words every episode, none of them a training sentence
        assert not seen & {s for g in all_goals() for s in instructions_for(g)}
    finally:
        env.close()
    with pytest.raises(ValueError, match="phrasing='odd' must be one of"):
        ArmEnv(CFG, phrasing="odd")
    with pytest.raises(ValueError, match="a fixed instruction has its own"):
        ArmEnv(CFG, phrasing="training", instruction="put the red block in the box")


def test_relation_goals_are_never_done_at_the_start(envs):
    env = envs["relation"]
    for seed in range(60):
        env.reset(seed, 2 + seed % 5)
        assert env.status() == "running", (seed, env.instruction)


def test_fixed_instruction_is_parsed_against_the_table():
    env = ArmEnv(CFG, instruction="Put the red one on top of the blue one.")
    try:
        seeds = {}
        for seed in range(40):
            colours = set(_colours_of(seed))
            seeds.setdefault({"red", "blue"} <= colours, seed)
        env.reset(seeds[True], 4)
        assert env.goal == Goal("stack", "red", "blue")
        assert env.instruction == "Put the red one on top of the blue one."
        with pytest.raises(ValueError, match=rf"does not fit episode seed {seeds[False]}.*no (red|blue) block"):
            env.reset(seeds[False], 4)
    finally:
        env.close()


def _colours_of(seed: int) -> list[str]:
    env = ArmEnv(CFG)
    try:
        env.reset(seed, 4)
        return [o.colour for o in env.objects() if o.kind == "block"]
    finally:
        env.close()


@pytest.mark.parametrize("kwargs,match", [
    ({"task": "tower"}, "task='tower'"),
    ({"instruction": "put the red block in the bin"}, "unknown word 'bin'"),
    ({"instruction": ""}, "empty"),
    ({"instruction": float("nan")}, "NaN"),
])
def test_bad_task_or_instruction_is_refused_at_construction(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ArmEnv(CFG, **kwargs)


def test_crowded_world_keeps_to_the_box_task():
    from arm_act.sim.perturb import perturbation

    with pytest.raises(ValueError, match="crowded"):
        ArmEnv(CFG, perturbation=perturbation("crowded"), task="stack")


# --- success rules ---------------------------------------------------------------------
def _two_blocks(env, goal_family):
    env.reset(0, 2)
    goal = env.goal
    assert goal.family == goal_family
    return goal


@pytest.mark.parametrize("offset,expected", [
    ((0.0, 0.0), "success"), ((0.015, 0.0), "success"), ((0.0, -0.015), "success"),
])
def test_stack_success_on_the_reference(envs, offset, expected):
    env = envs["stack"]
    goal = _two_blocks(env, "stack")
    base = np.array([0.45, 0.10, S / 2])
    env.place_block(goal.reference, base)
    env.place_block(goal.colour, base + [offset[0], offset[1], S])
    assert env.status() == expected
    for _ in range(10):
        env.step()
    assert env.status() == "success"


def test_stack_is_not_done_beside_the_reference_or_with_the_gripper_closed(envs):
    env = envs["stack"]
    goal = _two_blocks(env, "stack")
    base = np.array([0.45, 0.10, S / 2])
    env.place_block(goal.reference, base)
    env.place_block(goal.colour, base + [0.06, 0.0, 0.0])
    assert env.status() == "running"
    env.reset(0, 2)
    env.place_block(goal.reference, base)
    env.place_block(goal.colour, base + [0.0, 0.0, S])
    env.set_gripper(0.0)
    assert env.status() == "running"


def test_stack_fails_with_a_block_in_the_box(envs):
    env = envs["stack"]
    goal = _two_blocks(env, "stack")
    bx, by = CFG.box_center
    env.place_block(goal.reference, np.array([bx, by, 0.01 + S / 2 + 0.002]))
    assert env.status() == "failure"


@pytest.mark.parametrize("relation", RELATIONS)
@pytest.mark.parametrize("where,expected", [
    ("side", "success"), ("near", "running"), ("far", "running"), ("other_side", "running"),
    ("in_box", "failure"),
])
def test_relation_success_zone(relation, where, expected):
    env = ArmEnv(CFG, instruction=f"put the red block {_words(relation)} the blue block")
    try:
        seed = next(s for s in range(40) if {"red", "blue"} <= set(_colours_of(s)))
        env.reset(seed, 4)
        for o in env.objects():  # the other blocks out of the way (still on the table)
            if o.kind == "block" and o.colour not in ("red", "blue"):
                env.place_block(o.colour, np.array([0.0, 0.6 - 0.08 * len(o.colour) / 6, S / 2]))
        ref = np.array([0.48, 0.08, S / 2])
        d = np.array([*RELATION_DIRECTIONS[relation], 0.0])
        spot = {"side": ref + 0.08 * d, "near": ref + 0.03 * d, "far": ref + 0.14 * d, "other_side": ref - 0.08 * d,
                "in_box": np.array([*CFG.box_center, 0.01 + S / 2 + 0.002])}[where]
        env.place_block("blue", ref)
        env.place_block("red", spot)
        assert env.status() == expected
    finally:
        env.close()


def _words(relation: str) -> str:
    return {"left": "left of", "right": "right of", "front": "in front of", "behind": "behind"}[relation]


def test_relation_zone_is_a_ring_sector_per_side():
    ref = np.zeros(2)
    assert in_relation_zone([0.0, -0.08], ref, "left") and not in_relation_zone([0.0, -0.08], ref, "right")
    assert in_relation_zone([0.08, 0.0], ref, "front") and in_relation_zone([-0.08, 0.0], ref, "behind")
    a = math.radians(44.0)
    assert in_relation_zone([0.08 * math.sin(a), -0.08 * math.cos(a)], ref, "left")
    a = math.radians(46.0)
    assert not in_relation_zone([0.08 * math.sin(a), -0.08 * math.cos(a)], ref, "left")
    assert not in_relation_zone([0.0, -0.035], ref, "left") and not in_relation_zone([0.0, -0.13], ref, "left")
    # The four sectors never overlap.
    for angle in np.linspace(0, 2 * math.pi, 73):
        p = 0.08 * np.array([math.cos(angle), math.sin(angle)])
        assert sum(in_relation_zone(p, ref, r) for r in RELATIONS) <= 1


# --- the expert ------------------------------------------------------------------------
@pytest.mark.parametrize("task,seeds", [("stack", (0, 1)), ("relation", (2, 3)), ("mix", (4,))])
def test_expert_reaches_every_family_goal(envs, task, seeds):
    env = envs[task]
    for seed in seeds:
        agent = ExpertAgent(rng=perturbation_rng(seed))
        try:
            result = run_episode(env, agent, seed, 4, render=False)
        finally:
            agent.close()
        assert result.success, (seed, result.instruction, result.status)
        assert result.goal == env.goal and result.goal.family == (task if task != "mix" else result.goal.family)


def test_expert_follows_a_held_out_phrasing():
    seed = next(s for s in range(40) if {"red", "blue"} <= set(_colours_of(s)))
    env = ArmEnv(CFG, instruction="behind the blue block put the red block")
    agent = ExpertAgent()
    try:
        result = run_episode(env, agent, seed, 4, render=False)
    finally:
        agent.close()
        env.close()
    assert result.success and result.goal == Goal("relation", "red", "blue", "behind")


# --- the phrasings and the parser ------------------------------------------------------
def test_instructions_import_without_pybullet_or_numpy():
    code = ("import sys, arm_act.sim.instructions as i; "
            "bad = [m for m in ('pybullet', 'numpy', 'torch') if m in sys.modules]; "
            "assert not bad, bad; print(i.Goal('box', 'red').instruction)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "put the red block in the box"


def test_every_phrasing_parses_back_and_held_out_never_appears_in_training():
    training = set(training_sentences())
    for goal in all_goals():
        for held_out in (False, True):
            sentences = instructions_for(goal, held_out)
            assert sentences
            for text in sentences:
                assert parse_goal(text, goal.colours) == goal, text
        assert not training & set(instructions_for(goal, held_out=True)), goal
    for family in FAMILIES:
        assert len(training_phrasings(family)) >= 4 and len(held_out_phrasings(family)) >= 3
    assert training_phrasings("box")[0] == "put the {c} block in the box"


@pytest.mark.parametrize("text,reason", [
    ("", "empty"),
    ("   ", "empty"),
    (None, "text, got NoneType"),
    (float("nan"), "NaN"),
    ("put the red block in the bin", "unknown word 'bin'"),
    ("put the block in the box", "no colour"),
    ("put the red block", "no place"),
    ("stack the red block on the red block", "'red' is named twice"),
    ("put the red block in the box", "no red block on the table"),
    ("put the red blue green block in the box", "3 colours"),
    ("put the blue block on the green block in the box", "two tasks"),
    ("put the blue block left of the green block behind", "two relations"),
    ("put the blue block in the box next to green", "unknown word 'next'"),
    ("put the blue and green blocks in the box", "unknown word 'blocks'"),
    ("put the blue block and the green block in the box", "box task names one colour"),
    ("stack the blue block", "two colours"),
    ("green stack blue", "no 'on' or 'onto'"),
])
def test_parser_refuses_with_a_reason(text, reason):
    result = parse_goal(text, ["blue", "green", "yellow"])
    assert isinstance(result, Refusal) and not result and reason in result.reason, result
    with pytest.raises(ValueError, match="refused"):
        parse_goal_or_raise(text, ["blue", "green", "yellow"])


@pytest.mark.parametrize("text,goal", [
    ("Stack the RED block onto the blue block!", Goal("stack", "red", "blue")),
    ("on the blue block stack the red one", Goal("stack", "red", "blue")),
    ("put the red block to the right of the blue block", Goal("relation", "red", "blue", "right")),
    ("put the red block on the left of the blue block", Goal("relation", "red", "blue", "left")),
    ("  put the green block in the box  ", Goal("box", "green")),
])
def test_parser_word_orders_and_normalisation(text, goal):
    assert parse_goal(text) == goal


def test_goal_validates_and_round_trips():
    with pytest.raises(ValueError):
        Goal("tower", "red")
    with pytest.raises(ValueError):
        Goal("stack", "red", "red")
    with pytest.raises(ValueError):
        Goal("relation", "red", "blue", "above")
    with pytest.raises(ValueError):
        Goal("box", "red", "blue")
    for goal in all_goals()[::7]:
        assert Goal.from_dict(goal.to_dict()) == goal


_WORDS = sorted(KNOWN_WORDS) + ["box", "pink", "", "??", "on", "left", "nan", "BLUE", "x" * 40]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), max_size=14), st.sets(st.sampled_from(COLOURS)))
def test_parser_never_crashes_on_word_salad(words, table):
    result = parse_goal(" ".join(words), table)
    assert isinstance(result, (Goal, Refusal))
    if isinstance(result, Goal):
        assert set(result.colours) <= table
    else:
        assert result.reason and "\n" not in result.reason


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_parser_never_crashes_on_any_text(text):
    assert isinstance(parse_goal(text), (Goal, Refusal))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(all_goals()), st.booleans(), st.data())
def test_every_sentence_parses_to_its_goal(goal, held_out, data):
    text = data.draw(st.sampled_from(instructions_for(goal, held_out)))
    assert parse_goal(text, COLOURS) == goal


def test_family_vocab_extends_the_shipped_one():
    from arm_act.common.instructions import family_vocab, longest_instruction
    from arm_act.policy.vocab import InstructionTokenizer, default_vocab

    old, new = default_vocab(), family_vocab()
    assert new[: len(old)] == old and len(new) > len(old) and len(set(new)) == len(new)
    tokenizer = InstructionTokenizer(new, longest_instruction())
    for text in training_sentences():
        ids, _ = tokenizer.encode(text)
        assert 1 not in ids.tolist(), text  # no <unk> in a training sentence
    assert longest_instruction(held_out=False) <= longest_instruction()


# --- the report's check from the object markers ----------------------------------------
@settings(max_examples=60, deadline=None)
@given(family=st.sampled_from(["stack", "relation"]),
       dx=st.floats(-0.14, 0.14), dy=st.floats(-0.14, 0.14), dz=st.sampled_from([0.0, S, 1.4 * S, 0.3 * S]))
@example(family="stack", dx=0.01, dy=-0.005, dz=S)  # on it
@example(family="stack", dx=0.03, dy=0.0, dz=S)  # overhanging too far
@example(family="relation", dx=0.0, dy=-0.08, dz=0.0)  # left of it, and so right, front or behind
@example(family="relation", dx=0.0, dy=0.08, dz=0.0)
@example(family="relation", dx=0.0, dy=-0.08, dz=S)  # in the zone, but not on the table
def test_the_reports_check_on_the_markers_is_the_sims_rule(envs, family, dx, dy, dz):
    """`arm-act report` judges stack and relation episodes from the final `objects` markers
    alone; it agrees with the sim's geometry (PickPlaceTask.stacked / beside, no block in
    the box) wherever the named block is put."""
    from arm_act.eval.report import objects_success
    from arm_act.ros import conversions as conv

    env = envs[family]
    goal = _two_blocks(env, family)
    base = np.array([0.45, 0.10, S / 2])
    env.place_block(goal.reference, base)
    env.place_block(goal.colour, base + [dx, dy, dz])
    task = env._task
    if family == "stack":
        sim_rule = task.stacked(goal.colour, goal.reference)
    else:
        sim_rule = task.beside(goal.colour, goal.reference, goal.relation)
    sim_rule = sim_rule and not any(task.in_box(c) for c in task.blocks)
    assert objects_success(conv.objects_msg(0.0, env.objects()), env.instruction) == sim_rule


def test_the_reports_check_reads_any_phrasing_and_refuses_unreadable_words(envs):
    from arm_act.eval.report import objects_success
    from arm_act.ros import conversions as conv

    env = envs["stack"]
    goal = _two_blocks(env, "stack")
    base = np.array([0.45, 0.10, S / 2])
    env.place_block(goal.reference, base)
    env.place_block(goal.colour, base + [0.0, 0.0, S])
    markers = conv.objects_msg(0.0, env.objects())
    assert objects_success(markers, f"place the {goal.colour} block onto the {goal.reference} block") is True
    assert objects_success(markers, f"put the {goal.colour} block left of the {goal.reference} block") is False
    assert objects_success(markers, "stack it on the thing") is None
    assert objects_success(None, env.instruction) is None
