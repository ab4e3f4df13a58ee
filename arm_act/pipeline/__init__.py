"""`arm-act pipeline` as a library: the whole recipe from nothing to a checkpoint.

    config = load("config/pipeline_default.yaml")          # arm_act/pipeline/config.py
    result = Pipeline(config, Path("runs/v7"), RunOptions(device="cuda")).run()

Stages, in order (arm_act/pipeline/run.py): collect each demonstration set, train stage 1
(grounding layouts are rendered inside training), then per takeover round collect with the
newest policy and fine-tune, then the evaluations of the final checkpoint, the robustness
table and the report (report.md, plots, the checkpoint copied beside them). Each stage is
resumable and calls the library (collect, train_from_bags, evaluate, robustness_suite),
never the command line. This package sits above data and eval; nothing but cli imports it.
"""
from arm_act.pipeline.config import PipelineConfig, PipelineConfigError, load
from arm_act.pipeline.run import Pipeline, PipelineError, RunOptions

__all__ = ["Pipeline", "PipelineConfig", "PipelineConfigError", "PipelineError", "RunOptions", "load"]
