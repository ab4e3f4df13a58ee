"""`arm-act pipeline` end to end with a tiny recipe: two demonstration sets, stage-1
training of a tiny model, one takeover round and its fine-tune, an evaluation, a robustness
variant and the report; interrupted (SIGINT) after training and resumed, skipping the
finished stages. And the recipe's validation."""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from arm_act.pipeline import Pipeline, PipelineConfigError, PipelineError, RunOptions, load
from arm_act.pipeline.config import from_dict

ROOT = Path(__file__).resolve().parents[1]

TINY = {
    "blocks": "2",
    "workers": 1,
    "demos": [{"name": "plain", "episodes": 2, "seed": 11}, {"name": "perturbed", "episodes": 1, "seed": 400,
                                                              "perturb": 0.3}],
    # The family vocabulary and paraphrases (train_families.json), so that the takeover round and
    # the evaluation can run other families than box.
    "train": {"config": str(ROOT / "config" / "train_families.json"),
              "policy": {"width": 32, "heads": 4, "encoder_layers": 1, "chunk_size": 10,
                         "target_weight": 1.0},
              "train": {"steps": 4, "batch_size": 4, "val_every": 2, "checkpoint_every": 2, "warmup_steps": 1,
                        "augment": False, "grounding_layouts": 4, "threads": 1}},
    "rounds": [{"name": "takeover", "episodes": 1, "seed": 300000, "handover": [0.2, 0.4], "task": "stack",
                "train": {"steps": 2, "hold_after_end": True}}],
    "evals": [{"name": "2", "episodes": 1, "seed": 100000, "blocks": "2", "time_limit": 2, "task": "relation",
               "phrasing": "training"}],
    "robustness": {"episodes": 1, "seed": 400000, "blocks": "2", "variants": ["size"], "time_limit": 2},
}


def _wait_for(condition, timeout: float, proc: subprocess.Popen) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        if proc.poll() is not None:
            return condition()
        time.sleep(0.05)
    return False


def _sigint_as_at_a_terminal() -> None:
    """Ctrl-C as a terminal user has it: a shell without job control starts background jobs
    (CI runners, `cmd &`) with SIGINT ignored, children inherit that, and Python then installs
    no KeyboardInterrupt handler at all."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.e2e
def test_tiny_pipeline_interrupted_and_resumed(tmp_path):
    recipe, out = tmp_path / "tiny.yaml", tmp_path / "run"
    recipe.write_text(yaml.safe_dump(TINY))
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST"}
    proc = subprocess.Popen([sys.executable, "-m", "arm_act.cli", "pipeline", "--config", str(recipe), "--out",
                             str(out), "--device", "cpu"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_sigint_as_at_a_terminal)
    trained = out / "stages" / "03_train_stage1.json"
    try:
        assert _wait_for(trained.is_file, 600, proc), proc.communicate()[1][-3000:]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert "interrupted" in err
    assert not (out / "stages" / "11_report.json").exists()  # it did stop before the end
    assert not (out / "report.md").exists()
    done_before = {p.name: p.stat().st_mtime_ns for p in (out / "stages").glob("0[123]_*.json")}
    assert sorted(done_before) == ["01_collect_plain.json", "02_collect_perturbed.json", "03_train_stage1.json"]

    pipeline = Pipeline(load(recipe), out)
    assert [s.name for s in pipeline.stages] == [
        "collect_plain", "collect_perturbed", "train_stage1", "collect_takeover", "train_takeover", "eval_2",
        "robustness", "report"]
    result = pipeline.run()
    statuses = {s["name"]: s["status"] for s in result["stages"]}
    assert [statuses[n] for n in ("collect_plain", "collect_perturbed", "train_stage1")] == ["skipped"] * 3
    assert statuses["report"] == "ran" and statuses["eval_2"] == "ran"
    for name, mtime in done_before.items():  # the finished stages were not redone
        assert (out / "stages" / name).stat().st_mtime_ns == mtime

    # What the stages made: bags, two checkpoints (the fine-tune from stage 1), evaluations, the report.
    assert len(list((out / "data" / "plain").iterdir())) == 2
    tuned = json.loads((out / "checkpoints" / "takeover" / "metrics.json").read_text())
    assert tuned["train"]["init_from"] == str(out / "checkpoints" / "stage1") and tuned["steps"] == 2
    assert tuned["data"]["episodes"] == 4  # 2 + 1 demonstrations + 1 takeover episode
    evaluation = json.loads((out / "evals" / "2.json").read_text())
    assert evaluation["episodes"] == 1 and evaluation["policy"]["checkpoint"] == str(out / "checkpoints" / "takeover")
    # The round's and the evaluation's task families reached their episodes.
    from arm_act.bags import custom_data, find_bags

    assert [custom_data(b)["family"] for b in find_bags([out / "data" / "takeover"])] == ["stack"]
    assert "family" not in custom_data(find_bags([out / "data" / "plain"])[0])  # box: as before
    assert evaluation["task"] == "relation" and evaluation["phrasing"] == "training"
    assert evaluation["results"][0]["family"] == "relation"
    assert "regrasp" in evaluation
    table = json.loads((out / "evals" / "robustness.json").read_text())
    assert [r["variant"] for r in table["rows"]] == ["size"] and table["rows"][0]["expert"]["episodes"] == 1
    for name in ("model.safetensors", "config.json", "normalization.json", "metrics.json"):
        assert (out / "checkpoint" / name).read_bytes() == (out / "checkpoints" / "takeover" / name).read_bytes()
    report = (out / "report.md").read_text()
    assert "| train_takeover |" in report and "| size |" in report and "report/success.png" in report
    assert (out / "report" / "success.png").stat().st_size > 1000
    assert (out / "report" / "loss_train_stage1.png").is_file()
    log = (out / "pipeline.log").read_text()
    assert "[3/8] train_stage1: done before, skipped" in log and "interrupted" in log
    assert "eval 2: 1/1 episodes, " in log  # evaluations log their progress too
    assert "robustness size, policy: 1/1 episodes, " in log and "robustness size, expert: 1/1 episodes, " in log

    # Redo one training through torchrun (--nproc-per-node 1): delete its manifest and output.
    import shutil

    shutil.rmtree(out / "checkpoints" / "takeover")
    (out / "stages" / "05_train_takeover.json").unlink()
    redo = Pipeline(load(recipe), out, RunOptions(device="cpu", nproc_per_node=1, until="train_takeover")).run()
    assert [s["name"] for s in redo["stages"] if s["status"] == "ran"] == ["train_takeover"]
    assert json.loads((out / "checkpoints" / "takeover" / "metrics.json").read_text())["steps"] == 2
    log = (out / "pipeline.log").read_text()  # rank 0's progress reached the log
    assert "arm_act.policy.train: step 2/2" in log.split("[5/8] train_takeover: started")[-1]

    # A third run does nothing; a changed recipe is refused for the stage it changes.
    again = Pipeline(load(recipe), out).run()
    assert {s["status"] for s in again["stages"]} == {"skipped"}
    # The run moved elsewhere resumes there: its stages name the old directory's paths.
    elsewhere = tmp_path / "moved" / "run"
    shutil.copytree(out, elsewhere)
    there = Pipeline(load(recipe), elsewhere).run()
    assert {s["status"] for s in there["stages"]} == {"skipped"}
    assert f"train_takeover: made in {out}, the same stage there" in (elsewhere / "pipeline.log").read_text()
    changed = dataclasses.replace(load(recipe), evals=(dataclasses.replace(load(recipe).evals[0], episodes=2),))
    moved = Pipeline(changed, out)
    with pytest.raises(PipelineError, match="eval_2 .* other parameters"):
        moved.is_done(moved.stages[5])


@pytest.mark.unit
def test_a_resumed_stage_counts_the_time_of_every_run(tmp_path):
    from arm_act.pipeline.run import Stage

    recipe, out = tmp_path / "tiny.yaml", tmp_path / "run"
    recipe.write_text(yaml.safe_dump(TINY))
    calls = []

    def slow_then_done():
        calls.append(1)
        time.sleep(0.3)
        if len(calls) == 1:
            raise KeyboardInterrupt
        (out / "made").write_text("")
        return {}

    pipeline = Pipeline(load(recipe), out)
    pipeline.stages = [Stage(1, "slow", {"a": 1}, out / "made", slow_then_done)]
    with pytest.raises(KeyboardInterrupt):
        pipeline.run()
    assert not (out / "stages" / "01_slow.json").exists()
    pipeline.run()
    manifest = json.loads((out / "stages" / "01_slow.json").read_text())
    assert len(manifest["runs_s"]) == 2 and all(t >= 0.3 for t in manifest["runs_s"])
    assert manifest["wall_time_s"] == pytest.approx(sum(manifest["runs_s"]), abs=0.02)
    assert "over 2 runs" in (out / "pipeline.log").read_text()
    assert not list((out / "stages").glob(".*.runs"))  # kept only while the stage is unfinished


@pytest.mark.unit
@pytest.mark.parametrize("made_n,done", [(1, True), (2, False)])
def test_a_moved_run_resumes_only_the_same_stages(tmp_path, made_n, done):
    """A manifest made in another directory counts when its parameters are this stage's with
    that directory's path; any other difference is refused as in place."""
    from arm_act.pipeline.run import Stage, _digest

    recipe, old, out = tmp_path / "tiny.yaml", tmp_path / "old" / "run", tmp_path / "new" / "run"
    recipe.write_text(yaml.safe_dump(TINY))
    stage = Stage(1, "train", {"data": [str(out / "data" / "a")], "init": str(out), "n": 1}, out / "checkpoints" / "x",
                  lambda: {})
    made = {"data": [str(old / "data" / "a")], "init": str(old), "n": made_n}
    (out / "checkpoints" / "x").mkdir(parents=True)
    (out / "stages").mkdir()
    (out / "stages" / stage.manifest_name).write_text(json.dumps(
        {"stage": "train", "params": made, "params_digest": _digest(made), "output": str(old / "checkpoints" / "x")}))
    pipeline = Pipeline(load(recipe), out)
    if done:
        assert pipeline.is_done(stage)
    else:
        with pytest.raises(PipelineError, match="train .* other parameters"):
            pipeline.is_done(stage)


@pytest.mark.unit
@pytest.mark.parametrize("change,message", [
    ({"demos": []}, "demos"),
    ({"rounds": [{"name": "r", "episodes": 1, "seed": 1, "handover": [5, 1]}]}, "handover"),
    ({"rounds": [{"name": "r", "episodes": 1, "seed": 1, "handover": "later"}]},
     r"handover='later'.*miss, grasp or push"),
    ({"rounds": [{"name": "r", "episodes": 1, "seed": 1, "handover": "push"}]},
     r"rounds\[0\]\.handover='push' needs world: push \(got None\)"),
    ({"evals": [{"name": "a b", "episodes": 1, "seed": 1}]}, "name"),
    ({"train": {"train": {"stepz": 3}}}, "stepz"),
    ({"train": {"train": {"steps": 0}}}, "steps"),
    ({"robustness": {"episodes": 1, "seed": 1, "variants": "rain"}}, "rain"),
    ({"colour": "red"}, "unknown keys"),
    ({"eval_assist": "yes"}, r"eval_assist='yes' must be true or false"),
    ({"demos": [{"name": "d", "episodes": 1, "seed": 1, "world": "fog"}]}, r"demos\[0\]\.world='fog'"),
])
def test_recipe_errors_name_the_field(change, message):
    with pytest.raises(PipelineConfigError, match=message):
        from_dict({**TINY, **change}, ROOT / "config")


@pytest.mark.unit
def test_a_demo_set_can_randomise_the_world():
    config = from_dict({**TINY, "demos": [{"name": "lit", "episodes": 1, "seed": 500000, "world": "lighting"}]},
                       ROOT / "config")
    assert config.demos[0].world == "lighting"
    stage = Pipeline(config, Path("/nonexistent/run")).stages[0]
    assert stage.name == "collect_lit" and stage.params["world"] == "lighting"
    plain = Pipeline(from_dict(TINY, ROOT / "config"), Path("/nonexistent/run")).stages[0]
    assert "world" not in plain.params  # unchanged for recipes without it: their runs still resume


@pytest.mark.unit
def test_a_recipe_can_name_task_families_and_start_from_a_checkpoint(tmp_path):
    recipe = {**TINY, "demos": [{"name": "mix", "episodes": 1, "seed": 600000, "task": "mix"}],
              "train": {**TINY["train"], "init": "../checkpoints/default"},
              "evals": [{"name": "stack_heldout", "episodes": 1, "seed": 100000, "task": "stack",
                         "phrasing": "held-out"}]}
    config = from_dict(recipe, ROOT / "config")
    assert config.demos[0].task == "mix" and config.init == str(ROOT / "checkpoints" / "default")
    assert config.evals[0].task == "stack" and config.evals[0].phrasing == "held-out"
    stages = {s.name: s for s in Pipeline(config, tmp_path / "run").stages}
    assert stages["collect_mix"].params["task"] == "mix"
    assert stages["train_stage1"].params["init"] == config.init
    assert stages["eval_stack_heldout"].params["phrasing"] == "held-out"
    assert config.train_config(init_from=config.init).init_from == config.init
    # A recipe without the keys plans the stages it planned before (their runs still resume).
    plain = {s.name: s.params for s in Pipeline(from_dict(TINY, ROOT / "config"), tmp_path / "old").stages}
    assert "task" not in plain["collect_plain"] and "init" not in plain["train_stage1"]
    assert "task" not in plain["robustness"] and "phrasing" not in plain["collect_takeover"]
    for change, message in [({"task": "juggle"}, r"demos\[0\]\.task='juggle'"),
                            ({"phrasing": "poetic"}, r"evals\[0\]\.phrasing='poetic'")]:
        where = "demos" if "task" in change else "evals"
        bad = {**recipe, where: [{**recipe[where][0], **change}]}
        with pytest.raises(PipelineConfigError, match=message):
            from_dict(bad, ROOT / "config")
    with pytest.raises(PipelineConfigError, match="train.init"):
        from_dict({**TINY, "train": {**TINY["train"], "init": 3}}, ROOT / "config")
    with pytest.raises(PipelineConfigError, match=r"train.init='nowhere': .* holds no checkpoint"):
        from_dict({**TINY, "train": {**TINY["train"], "init": "nowhere"}}, ROOT / "config")
    with pytest.raises(PipelineConfigError, match=r"train.config=3 must be a JSON file or a list"):
        from_dict({**TINY, "train": {**TINY["train"], "config": 3}}, ROOT / "config")


@pytest.mark.unit
def test_demos_rounds_and_evaluations_can_change_the_goal(tmp_path):
    """change_goal: collected and evaluated as `arm-act collect|eval --change-goal`; a round's
    word dropout goes into its digest only when set (old runs keep theirs)."""
    from arm_act.pipeline.report import _task_cell

    recipe = {**TINY, "demos": [{"name": "gc", "episodes": 1, "seed": 670000, "change_goal": "0.5:box"}],
              "rounds": [{**TINY["rounds"][0], "change_goal": " 1:stack ", "train": {"word_dropout": 0.15}}],
              "evals": [{"name": "gc", "episodes": 1, "seed": 1000, "change_goal": "0.5:box"}]}
    config = from_dict(recipe, ROOT / "config")
    assert (config.demos[0].change_goal, config.rounds[0].change_goal, config.evals[0].change_goal) == (
        "0.5:box", "1:stack", "0.5:box")
    stages = {s.name: s.params for s in Pipeline(config, tmp_path / "run").stages}
    assert stages["collect_gc"]["change_goal"] == "0.5:box" and stages["eval_gc"]["change_goal"] == "0.5:box"
    assert stages["train_takeover"]["train"]["word_dropout"] == 0.15
    plain = {s.name: s.params for s in Pipeline(from_dict(TINY, ROOT / "config"), tmp_path / "old").stages}
    assert "change_goal" not in plain["collect_plain"] and "word_dropout" not in plain["train_takeover"]["train"]
    for where, text, message in [("demos", "soon", "not AT_S:TO"), ("evals", "1:put it there", "unknown word"),
                                 ("rounds", "-1:box", "finite number")]:
        bad = {**recipe, where: [{**recipe[where][0], "change_goal": text}]}
        with pytest.raises(PipelineConfigError, match=rf"{where}\[0\]\.change_goal: .*{message}"):
            from_dict(bad, ROOT / "config")
    result = {"goal_change": {"change": "0.5:box", "reached_new_goal": 7, "episodes_changed": 9}}
    assert _task_cell({"task": "stack"}, result) == "; task stack; goal change 0.5:box: 7/9 reached the new goal"
    assert _task_cell({}, {}) == ""


@pytest.mark.unit
@pytest.mark.parametrize("word", ["miss", "grasp", "push"])
def test_a_round_can_hand_over_at_a_missed_grasp_at_the_grasp_or_after_the_push(word):
    rounds = [{"name": "regrasp", "episodes": 1, "seed": 320000, "handover": word, "world": "push"}]
    config = from_dict({**TINY, "rounds": rounds}, ROOT / "config")
    assert config.rounds[0].handover == word
    stage = next(s for s in Pipeline(config, Path("/nonexistent/run")).stages if s.name == "collect_regrasp")
    assert stage.params["handover"] == word


@pytest.mark.unit
def test_default_recipe_is_todays_recipe():
    config = load(ROOT / "config" / "pipeline_default.yaml")
    assert [(d.episodes, d.seed, d.perturb, d.world) for d in config.demos] == [
        (400, 0, 0.0, None), (200, 400, 0.3, None), (200, 830000, 0.0, "push")]
    assert config.train == json.loads((ROOT / "config" / "train_default.json").read_text())["train"]
    assert config.train_config().steps == 12000
    rounds = [(r.episodes, r.seed, r.handover, r.world, config.train_config(r.train, "x")) for r in config.rounds]
    assert [(e, s, h, w) for e, s, h, w, _ in rounds] == [(600, 300000, (0.5, 10.0), None),
                                                          (600, 310000, (0.5, 6.0), None)]
    assert [(t.steps, t.lr, t.warmup_steps, t.hold_after_end) for *_, t in rounds] == [
        (5000, 2.5e-4, 100, True), (3000, 2e-4, 100, True)]
    assert [(e.episodes, e.seed, e.blocks) for e in config.evals] == [(200, 100000, "2-5"), (200, 200000, "6")]
    assert (config.eval_latency_ticks, config.eval_assist) == (1, False)
    names = [s.name for s in Pipeline(config, Path("/nonexistent/run")).stages]
    assert names[:3] == ["collect_demos_plain", "collect_demos_perturbed", "collect_demos_push"]
    assert names[-5:] == ["train_takeover_2", "eval_2-5", "eval_6", "robustness", "report"]


@pytest.mark.unit
def test_push_round_recipe_is_the_default_without_push_demos_plus_a_push_round():
    """config/pipeline_push_round.yaml, the recipe before the default: the same plain and
    perturbed demonstrations and two rounds without the push demonstrations, then one round in
    the push world with `handover: push`."""
    default = load(ROOT / "config" / "pipeline_default.yaml")
    before = load(ROOT / "config" / "pipeline_push_round.yaml")
    assert before.demos == default.demos[:2] and before.train == default.train
    assert before.rounds[:2] == default.rounds
    assert [(r.name, r.seed, r.handover, r.world) for r in before.rounds[2:]] == [("push_3", 820000, "push", "push")]
    assert (before.evals, before.robustness) == (default.evals, default.robustness)


@pytest.mark.unit
def test_families_recipe_fine_tunes_the_shipped_policy_on_the_mix():
    from arm_act.policy.checkpoint import read_config
    from arm_act.policy.train import ADDABLE, GROWABLE

    config = load(ROOT / "config" / "pipeline_families.yaml")
    assert config.init == str(ROOT / "checkpoints" / "push_round")
    assert [(d.task, d.episodes, d.seed) for d in config.demos] == [("mix", 1200, 600000)]
    assert {r.task for r in config.rounds} == {"mix"} and [r.seed for r in config.rounds] == [620000, 630000, 640000]
    policy = config.policy_config()
    assert policy.place_weight > 0 and policy.condition_on_place and policy.condition_on_target
    # What init may do to the shipped checkpoint: grow the vocabulary and tokens, add the place head.
    assert set(read_config(ROOT / "checkpoints" / "push_round").differences(policy)) <= set(GROWABLE) | set(ADDABLE)
    train = config.train_config(init_from=config.init)
    assert train.paraphrase and train.grounding_task == "mix" and train.steps == 6000
    assert {(e.task, e.phrasing) for e in config.evals} >= {("stack", "canonical"), ("relation", "held-out")}


@pytest.mark.unit
def test_grasp_recipe_is_the_default_recipe_plus_a_grasp_round():
    """config/pipeline_grasp.yaml: its first 7 stages are pipeline_push_round.yaml's, parameter
    for parameter (that recipe before its push round), then one `handover: grasp` round; the
    evaluations are the same, of its own final checkpoint."""
    default = Pipeline(load(ROOT / "config" / "pipeline_push_round.yaml"), Path("/run")).stages
    grasp = Pipeline(load(ROOT / "config" / "pipeline_grasp.yaml"), Path("/run")).stages
    assert [(s.name, s.params) for s in grasp[:7]] == [(s.name, s.params) for s in default[:7]]
    collect, train = grasp[7:9]
    assert (collect.name, collect.params["handover"], collect.params["episodes"]) == ("collect_grasp_3", "grasp", 1000)
    assert collect.params["policy"] == "/run/checkpoints/takeover_2" and train.name == "train_grasp_3"
    assert train.params["data"][-1] == "/run/data/grasp_3" and len(train.params["data"]) == 5
    assert [s.name for s in grasp[9:]] == [s.name for s in default[9:]]
    assert all(s.params["policy"] == "/run/checkpoints/grasp_3" for s in grasp[9:12])


@pytest.mark.unit
def test_regrasp_recipe_is_the_grasp_recipe_plus_a_miss_round():
    """config/pipeline_regrasp.yaml: its first 9 stages are pipeline_grasp.yaml's, then one
    `handover: miss` round driven by the grasp round's checkpoint, trained on everything."""
    grasp = Pipeline(load(ROOT / "config" / "pipeline_grasp.yaml"), Path("/run")).stages
    regrasp = Pipeline(load(ROOT / "config" / "pipeline_regrasp.yaml"), Path("/run")).stages
    assert [(s.name, s.params) for s in regrasp[:9]] == [(s.name, s.params) for s in grasp[:9]]
    collect, train = regrasp[9:11]
    assert (collect.name, collect.params["handover"], collect.params["episodes"]) == ("collect_regrasp_4", "miss",
                                                                                       1500)
    assert collect.params["policy"] == "/run/checkpoints/grasp_3" and train.name == "train_regrasp_4"
    assert train.params["data"][-1] == "/run/data/regrasp_4" and len(train.params["data"]) == 6
    assert [s.name for s in regrasp[11:]] == [s.name for s in grasp[9:]]
    assert all(s.params["policy"] == "/run/checkpoints/regrasp_4" for s in regrasp[11:14])


@pytest.mark.unit
def test_push_demo_recipes_extend_the_default_recipe():
    """config/pipeline_push_demos.yaml: the default recipe, stage for stage, plus a round in the
    push world (`handover: push`) driven by round 2's checkpoint; _r4 adds one round after it in
    the push world with a drawn handover time, driven by push_3's checkpoint and trained on
    everything, then the same evaluations."""
    default = Pipeline(load(ROOT / "config" / "pipeline_default.yaml"), Path("/run")).stages
    demos = Pipeline(load(ROOT / "config" / "pipeline_push_demos.yaml"), Path("/run")).stages
    r4 = Pipeline(load(ROOT / "config" / "pipeline_push_demos_r4.yaml"), Path("/run")).stages
    assert [(s.name, s.params) for s in demos[:8]] == [(s.name, s.params) for s in default[:8]]
    assert default[2].params["world"] == "push" and default[2].params["episodes"] == 200
    collect, train = demos[8:10]
    assert (collect.name, collect.params["world"], collect.params["handover"]) == ("collect_push_3", "push", "push")
    assert collect.params["policy"] == "/run/checkpoints/takeover_2" and train.name == "train_push_3"
    assert [s.name for s in demos[10:]] == [s.name for s in default[8:]]
    assert [(s.name, s.params) for s in r4[:10]] == [(s.name, s.params) for s in demos[:10]]
    collect, train = r4[10:12]
    assert (collect.name, collect.params["world"], collect.params["handover"]) == ("collect_push_4", "push",
                                                                                   (1.5, 10.0))
    assert collect.params["policy"] == "/run/checkpoints/push_3" and train.name == "train_push_4"
    assert train.params["data"][-1] == "/run/data/push_4" and len(train.params["data"]) == 7
    assert [s.name for s in r4[12:]] == [s.name for s in demos[10:]]
    assert all(s.params["policy"] == "/run/checkpoints/push_4" for s in r4[12:14])


@pytest.mark.unit
def test_the_near_hand_recipe_is_the_default_with_layouts_beside_the_hand():
    """config/pipeline_near_hand.yaml: the default recipe, stage for stage, except that every
    training stage renders its borrowed-pose grounding layouts with the block beside the hand."""
    default = Pipeline(load(ROOT / "config" / "pipeline_default.yaml"), Path("/run")).stages
    near = Pipeline(load(ROOT / "config" / "pipeline_near_hand.yaml"), Path("/run")).stages
    assert [s.name for s in near] == [s.name for s in default]
    trains = [i for i, s in enumerate(default) if s.name.startswith("train_")]
    assert len(trains) == 3
    for i, (a, b) in enumerate(zip(default, near, strict=True)):
        if i not in trains:
            assert a.params == b.params, a.name
            continue
        assert b.params["train"]["grounding_near_hand"] == 1.0
        assert a.params["train"].get("grounding_near_hand", 0.0) == 0.0
        rest = {k: v for k, v in b.params["train"].items() if k != "grounding_near_hand"}
        assert rest == {k: v for k, v in a.params["train"].items() if k != "grounding_near_hand"}
        others = {k: v for k, v in a.params.items() if k != "train"}
        assert others == {k: v for k, v in b.params.items() if k != "train"}


@pytest.mark.unit
def test_the_conv_stem_recipe_is_the_default_with_a_stem_in_stage_one():
    """config/pipeline_conv_stem.yaml: the default recipe, stage for stage, except that every
    training stage's network has the convolutional stem (the rounds fine-tune stage 1's)."""
    default = Pipeline(load(ROOT / "config" / "pipeline_default.yaml"), Path("/run")).stages
    stem = Pipeline(load(ROOT / "config" / "pipeline_conv_stem.yaml"), Path("/run")).stages
    assert [s.name for s in stem] == [s.name for s in default]
    assert sum(s.name.startswith("train_") for s in stem) == 3
    for a, b in zip(default, stem, strict=True):
        if not a.name.startswith("train_"):
            assert a.params == b.params, a.name
            continue
        assert b.params["policy"]["stem_channels"] == [8, 16] and "stem_channels" not in a.params["policy"]
        assert {k: v for k, v in b.params["policy"].items() if k != "stem_channels"} == a.params["policy"]
        others = {k: v for k, v in a.params.items() if k != "policy"}
        assert others == {k: v for k, v in b.params.items() if k != "policy"}


@pytest.mark.unit
def test_a_collection_counts_only_complete_bags(tmp_path, monkeypatch):
    """An episode whose writer died is set aside as <name>.incomplete by collect: the stage's
    manifest counts it apart, and it never stands in for a missing episode."""
    from synthetic_bags import write_demo_bag

    from arm_act.bags import MARKER_NAME
    from arm_act.data import collect as collect_module

    recipe, out = tmp_path / "tiny.yaml", tmp_path / "run"
    recipe.write_text(yaml.safe_dump(TINY))
    pipeline = Pipeline(load(recipe), out)
    data = pipeline.data_dir("plain")
    write_demo_bag(data / "episode_11", ticks=10)
    aside = data / "episode_12.incomplete"
    aside.mkdir(parents=True)
    (aside / MARKER_NAME).write_text("{}")
    monkeypatch.setattr(collect_module, "collect", lambda *a, **k: {"episodes": 2})
    with pytest.raises(PipelineError, match="1 complete bags of 2"):
        pipeline._collect("plain", 2, 11, 0.0)
    assert pipeline._collect("plain", 1, 11, 0.0) == {"episodes": 2, "bags": 1, "incomplete_bags": 1}
