"""`arm-act pipeline`: the whole training recipe, from nothing to a checkpoint, resumable.

    arm-act pipeline --config config/pipeline_default.yaml --out runs/v7
    arm-act pipeline --config config/pipeline_default.yaml --out runs/v7 --device cuda --ray local
    arm-act pipeline --config my.yaml --out runs/try --until train_stage1

Stages, recipe and out-directory layout: arm_act/pipeline/. Rerunning the same command
continues where a run stopped (finished stages are skipped). This module parses the
options, calls arm_act.pipeline.Pipeline.run and prints what each stage did; the log is
also written to OUT/pipeline.log.
"""
from __future__ import annotations

import sys
from pathlib import Path

from arm_act.cli.main import CommandError


def configure(parser) -> None:
    parser.add_argument("--config", required=True, type=Path,
                        help="the recipe (YAML), e.g. config/pipeline_default.yaml")
    parser.add_argument("--out", required=True, type=Path, help="run directory (data, checkpoints, evals, report)")
    parser.add_argument("--device", default="auto",
                        help="training device: auto (CUDA when present), cpu, cuda, cuda:N; a GPU also runs the "
                             "evaluations' policy")
    parser.add_argument("--ray", metavar="ADDRESS", help="run collection and evaluation episodes as Ray tasks "
                        "(local, auto or ray://HOST:PORT)")
    parser.add_argument("--nproc-per-node", type=int, metavar="N", help="data-parallel training on N processes "
                        "(torchrun --standalone)")
    parser.add_argument("--until", metavar="STAGE", help="stop after this stage (names: --list)")
    parser.add_argument("--list", action="store_true", help="print the stages and whether each is done, run nothing")


def run(args) -> int:
    from arm_act.pipeline import Pipeline, PipelineConfigError, PipelineError, RunOptions, load

    if args.nproc_per_node is not None and args.nproc_per_node < 1:
        raise CommandError(f"--nproc-per-node {args.nproc_per_node} must be >= 1")
    try:
        pipeline = Pipeline(load(args.config), args.out, RunOptions(
            device=args.device, ray=args.ray, nproc_per_node=args.nproc_per_node, until=args.until))
        if args.list:
            for stage in pipeline.stages:
                print(f"{stage.index:2d} {stage.name:28s} {'done' if pipeline.is_done(stage) else 'to do'}")
            return 0

        def on_stage(stage, what: str) -> None:
            label = {"skip": "done before, skipped", "start": "running", "done": "done"}[what]
            print(f"[{stage.index}/{len(pipeline.stages)}] {stage.name}: {label}", file=sys.stderr, flush=True)

        result = pipeline.run(on_stage)
    except (PipelineConfigError, PipelineError) as exc:
        raise CommandError(str(exc)) from None
    ran = [s["name"] for s in result["stages"] if s["status"] == "ran"]
    skipped = [s["name"] for s in result["stages"] if s["status"] == "skipped"]
    print(f"ran {len(ran)} stage(s){': ' + ', '.join(ran) if ran else ''}; skipped {len(skipped)} done before")
    if result["report"]:
        print(f"report: {result['report']}; checkpoint: {result['checkpoint']}")
    print(f"log: {Path(result['out']) / 'pipeline.log'}")
    return 0


if __name__ == "__main__":
    from arm_act.cli.main import main

    sys.exit(main(["pipeline", *sys.argv[1:]]))
