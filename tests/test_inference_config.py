"""InferenceConfig: every inference setting with one default, checked the same way wherever
it is set (policy_node's parameters, `arm-act eval` flags, PolicySettings, the aim's settings)."""
import argparse
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from arm_act.policy.inference_config import InferenceConfig, describe_range, fields, meta_name

pytestmark = pytest.mark.unit


def test_every_setting_has_a_description_and_a_valid_default():
    config = InferenceConfig()
    for f in fields():
        assert f.metadata["help"], f.name
        assert InferenceConfig.check(f.name, getattr(config, f.name)) is None
    assert config.assist is False  # the network alone by default


@pytest.mark.parametrize("name, value, says", [
    ("regrasps", 101, "regrasps must be in 0 .. 100, not 101"),
    ("regrasps", 1.5, "regrasps must be in 0 .. 100"),
    ("regrasps", True, "regrasps must be in 0 .. 100"),
    ("max_joint_speed", 0.0, "max_joint_speed must be in (0, 10] rad/s, not 0.0"),
    ("ensemble_m", float("nan"), "ensemble_m must be in 0 .. 10"),
    ("regrasp_retry", "again", "regrasp_retry must be one of ['reflex', 'policy']"),
    ("torch_threads", 0, "torch_threads must be in 1 .. 256"),
    ("assist", "yes", "assist must be true or false"),
    ("device", "", "device must be a non-empty string"),
])
def test_bad_values_are_refused_with_the_name_the_caller_used(name, value, says):
    assert says in InferenceConfig.check(name, value)


def test_unknown_settings_are_an_error():
    with pytest.raises(KeyError, match="no inference setting 'warp'"):
        InferenceConfig.check("warp", 1)


@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(-1000, 1000))
def test_construction_and_check_agree(speed, regrasps):
    ok = InferenceConfig.check("max_joint_speed", speed) is None and InferenceConfig.check("regrasps", regrasps) is None
    try:
        InferenceConfig(max_joint_speed=speed, regrasps=regrasps)
        built = True
    except ValueError:
        built = False
    assert built == ok


def test_the_eval_flags_and_the_other_settings_take_their_defaults_from_it():
    from arm_act.assist.aim import AimSettings
    from arm_act.cli.eval import EVAL_SETTINGS, add_policy_arguments, settings_for
    from arm_act.eval.in_process import PolicySettings
    from arm_act.policy.inference_config import BEHAVIOUR

    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="expert")
    add_policy_arguments(parser)
    args = parser.parse_args([])
    defaults = InferenceConfig.defaults()
    for name in EVAL_SETTINGS:  # a behaviour flag left unset is None: the checkpoint decides
        assert getattr(args, name) == (None if name in BEHAVIOUR else defaults[name]), name
    behaviour, used = settings_for(args)
    assert used is None and behaviour == {k: defaults[k] for k in behaviour}
    settings = PolicySettings()
    assert {f.name: getattr(settings, f.name) for f in fields() if f.name != "latency_ticks"} == {
        k: v for k, v in defaults.items() if k != "latency_ticks"}
    assert (AimSettings().regrasps, AimSettings().retry) == (defaults["regrasps"], defaults["retry"])
    assert {meta_name(f) for f in fields()} >= {"torch_threads", "regrasp_retry", "assist"}
    assert describe_range(next(f for f in fields() if f.name == "execution")) == "one of ['ensemble', 'queue']"
    assert dataclasses.is_dataclass(settings) and isinstance(settings, InferenceConfig)


def test_a_checkpoints_inference_json_sets_what_the_flags_leave_unset(tmp_path):
    from arm_act.cli.eval import add_policy_arguments, settings_for
    from arm_act.policy.inference_config import load_inference_config, save_inference_config

    parser = argparse.ArgumentParser()
    parser.add_argument("--policy", default="expert")
    add_policy_arguments(parser)
    assert load_inference_config(tmp_path) is None  # a checkpoint saved before the file existed
    recorded = InferenceConfig(execution="queue", assist=True, regrasps=5, threads=2)
    save_inference_config(tmp_path, recorded)
    assert load_inference_config(tmp_path) == recorded
    behaviour, used = settings_for(parser.parse_args(["--policy", str(tmp_path)]))
    assert used == str(tmp_path / "inference.json")
    assert (behaviour["execution"], behaviour["assist"], behaviour["regrasps"]) == ("queue", True, 5)
    behaviour, _ = settings_for(parser.parse_args(["--policy", str(tmp_path), "--no-assist", "--execution",
                                                   "ensemble", "--threads", "1"]))
    assert (behaviour["execution"], behaviour["assist"], behaviour["regrasps"]) == ("ensemble", False, 5)
    assert "threads" not in behaviour  # how this machine runs it is never taken from the file


@pytest.mark.parametrize("text, says", [
    ("{not json", "cannot read it"),
    ("[1, 2]", "expected a JSON object"),
    ('{"executon": "queue"}', "unknown settings ['executon']"),
    ('{"regrasps": 500}', "regrasps must be in 0 .. 100, not 500"),
    ('{"max_joint_speed": NaN}', "max_joint_speed must be"),
])
def test_a_bad_inference_json_is_one_line_naming_the_file(tmp_path, text, says):
    from arm_act.policy.inference_config import load_inference_config

    (tmp_path / "inference.json").write_text(text)
    with pytest.raises(ValueError, match="inference.json") as info:
        load_inference_config(tmp_path)
    assert says in str(info.value) and "\n" not in str(info.value)


@given(st.fixed_dictionaries({}, optional={f.name: st.one_of(st.none(), st.booleans(), st.integers(-5, 500),
                                                               st.floats(allow_nan=True), st.text(max_size=8))
                                           for f in fields()}))
def test_from_dict_accepts_exactly_what_the_constructor_accepts(data):
    try:
        expected = InferenceConfig(**{k: float(v) if isinstance(v, int) and not isinstance(v, bool)
                                      and InferenceConfig.__dataclass_fields__[k].type in ("float", float) else v
                                      for k, v in data.items()})
    except ValueError:
        expected = None
    try:
        got = InferenceConfig.from_dict(data)
    except ValueError:
        got = None
    assert got == expected
