"""Seeing runs: the live topics and recorded bags in Rerun, on one layout and one sim-time
timeline (cameras with the policy's attention, the 3D scene with the arm, the predicted chunk's
path and the target head's guess, joints, gripper, diagnostics, the episode's state).

    view_bags(["runs/eval_bags"], save=Path("eval.rrd"))   # replay (`arm-act view`)
    RerunBridge(rec)                                       # a node for the live run (`arm-act demo --viewer rerun`)

Layer: like eval/bench/data, it may import nodes, bags, ros, common, sim and policy, never cli.
"""
from arm_act.view.layout import APPLICATION_ID, TIMELINE, blueprint
from arm_act.view.replay import ReplayResult, replay_bag, view_bags
from arm_act.view.sinks import ViewerError, WebViewer, open_recording

__all__ = ["APPLICATION_ID", "TIMELINE", "ReplayResult", "ViewerError", "WebViewer", "blueprint", "open_recording",
           "replay_bag", "view_bags"]
