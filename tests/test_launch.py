"""The launch files and the executables as launch and `ros2 run` start them.

- Every launch argument reaches a parameter that the node it is given to declares (read from
  the launch files' and the nodes' source), or is one of the structural arguments
  (namespace, discovery_range, respawn) and is used as such.
- `ros2 run` with no arguments at all: sim_node, then policy_node, run an episode.
- As launch_ros starts them (`--ros-args -r __node:=NAME -r __ns:=/NS --params-file
  <share>/config/X.yaml --params-file <tmp.yaml> -r /clock:=clock`), two pairs in the
  namespaces arm1 and arm2 on one domain each run their episode, with their own seeds,
  clock, topics and services; sim_node exits 0 after its episodes (what collect.launch.py's
  OnProcessExit -> Shutdown acts on); two SIGINTs stop the policies with exit 0.
"""
from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = sorted((ROOT / "launch").glob("*.launch.py"))
NODE_SOURCES = {
    "sim_node": ["arm_act/nodes/sim_node.py", "arm_act/nodes/sim_parameters.py"],
    "policy_node": ["arm_act/nodes/policy_node.py", "arm_act/nodes/policy_parameters.py",
                    "arm_act/nodes/controller.py"],
    "expert_node": ["arm_act/nodes/expert_node.py", "arm_act/nodes/controller.py"],
    "bag_recorder": ["arm_act/nodes/bag_recorder.py"],
}
BUILTIN_PARAMETERS = {"use_sim_time"}  # every rclpy node declares it
STRUCTURAL = {"namespace", "discovery_range", "dds_transport", "respawn"}


def declared_parameters(executable: str) -> set[str]:
    names = set(BUILTIN_PARAMETERS)
    for path in NODE_SOURCES[executable]:
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if not (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if name in ("declare_parameter", "declare"):
                names.add(node.args[0].value)
    if executable == "policy_node":  # its inference parameters are declared from InferenceConfig
        from arm_act.policy.inference_config import fields, meta_name

        names |= {meta_name(f) for f in fields()}
    return names


class LaunchSource:
    """What a launch file's generate_launch_description says, read from its AST."""

    def __init__(self, path: Path):
        tree = ast.parse(path.read_text())
        function = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                        and n.name == "generate_launch_description")
        self.assigned = {}
        for node in [*tree.body, *ast.walk(function)]:  # module constants, then the function's names
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.assigned[node.targets[0].id] = node.value
        self.function = function
        self.arguments = {n.args[0].value for n in ast.walk(function) if self._call_name(n) == "DeclareLaunchArgument"}
        self.nodes = [n for n in ast.walk(function) if self._call_name(n) in ("Node", "LifecycleNode")]

    @staticmethod
    def _call_name(node) -> str | None:
        if not isinstance(node, ast.Call):
            return None
        return node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)

    def resolve(self, node, depth=0):
        if isinstance(node, ast.Name) and node.id in self.assigned and depth < 10:
            return self.resolve(self.assigned[node.id], depth + 1)
        return node

    def configurations(self, expr) -> set[str]:
        """Launch argument names (LaunchConfiguration / its alias `arg`) used in `expr`."""
        found = set()
        todo = [expr]
        while todo:
            node = self.resolve(todo.pop())
            for sub in ast.walk(node):
                if self._call_name(sub) in ("LaunchConfiguration", "arg") and sub.args \
                        and isinstance(sub.args[0], ast.Constant):
                    found.add(sub.args[0].value)
                elif isinstance(sub, ast.Name) and sub.id in self.assigned and sub is not node:
                    todo.append(sub)
        return found

    def keyword(self, call, name):
        return next((k.value for k in call.keywords if k.arg == name), None)

    def parameters(self, call) -> list[tuple[str, set[str]]]:
        """(parameter name, launch arguments in its value) for every dict in parameters=[...]."""
        out = []
        items = self.resolve(self.keyword(call, "parameters"))
        for item in getattr(items, "elts", []):
            item = self.resolve(item)
            if isinstance(item, ast.Dict):
                for key, value in zip(item.keys, item.values, strict=True):
                    out.append((key.value, self.configurations(value)))
        return out


@pytest.mark.unit
@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: p.name)
def test_every_launch_argument_reaches_a_declared_parameter(path):
    source = LaunchSource(path)
    reached = set()
    for call in source.nodes:
        executable = ast.literal_eval(source.keyword(call, "executable"))
        declared = declared_parameters(executable)
        for name, arguments in source.parameters(call):
            assert name in declared, f"{path.name}: {executable} declares no parameter {name!r}"
            reached |= arguments
        # Every node runs in the namespace argument, with /clock remapped into it.
        assert source.configurations(source.keyword(call, "namespace")) == {"namespace"}, executable
        remaps = ast.unparse(source.resolve(source.keyword(call, "remappings")))
        assert "'/clock', 'clock'" in remaps, executable
    used = set()
    for node in ast.walk(source.function):
        if LaunchSource._call_name(node) not in ("DeclareLaunchArgument",):
            used |= {n.args[0].value for n in ast.walk(node) if LaunchSource._call_name(n) in ("LaunchConfiguration",
                                                                                               "arg") and n.args
                     and isinstance(n.args[0], ast.Constant)}
    assert used <= source.arguments, f"{path.name}: undeclared launch arguments {used - source.arguments}"
    for argument in sorted(source.arguments - STRUCTURAL):
        assert argument in reached, f"{path.name}: launch argument {argument!r} reaches no node parameter"
    # The structural ones do what they say.
    assert "namespace" in source.arguments and "discovery_range" in source.arguments
    env = [n for n in ast.walk(source.function) if LaunchSource._call_name(n) == "SetEnvironmentVariable"]
    assert any(ast.literal_eval(n.args[0]) == "ROS_AUTOMATIC_DISCOVERY_RANGE"
               and source.configurations(n.args[1]) == {"discovery_range"} for n in env)
    defaults = {n.args[0].value: source.keyword(n, "default_value") for n in ast.walk(source.function)
                if LaunchSource._call_name(n) == "DeclareLaunchArgument"}
    assert ast.literal_eval(defaults["discovery_range"]) == "LOCALHOST"  # a demo never talks to a neighbour
    assert any(ast.literal_eval(n.args[0]) == "ARM_ACT_DDS_TRANSPORT"
               and source.configurations(n.args[1]) == {"dds_transport"} for n in env)
    assert ast.literal_eval(defaults["dds_transport"]) == "udp"
    # policy_node drives its own lifecycle (its autostart parameter): no handler of the launch
    # file can fire again on a manual transition, and a respawned node activates itself.
    assert "ChangeState" not in ast.unparse(source.function)
    if "respawn" in source.arguments:
        for call in source.nodes:
            assert source.configurations(source.keyword(call, "respawn")) == {"respawn"}, ast.unparse(call)


@pytest.mark.unit
def test_collect_launch_shuts_down_when_the_sim_exits():
    text = (ROOT / "launch" / "collect.launch.py").read_text()
    tree = ast.parse(text)
    handlers = [n for n in ast.walk(tree) if LaunchSource._call_name(n) == "OnProcessExit"]
    assert len(handlers) == 1
    (handler,) = handlers
    keywords = {k.arg: ast.unparse(k.value) for k in handler.keywords}
    assert keywords["target_action"] == "sim" and "Shutdown" in keywords["on_exit"]


# ---------------------------------------------------------------- the executables
def launch_command(executable: str, name: str | None = None, namespace: str | None = None,
                   params_files: tuple = (), remaps: tuple = ()) -> list[str]:
    """What launch_ros runs for a Node action (ros2 run when everything is empty)."""
    command = [str(Path(sys.executable).parent / executable)]
    args = []
    if name:
        args += ["-r", f"__node:={name}"]
    if namespace:
        args += ["-r", f"__ns:=/{namespace}"]
    for path in params_files:
        args += ["--params-file", str(path)]
    for source, target in remaps:
        args += ["-r", f"{source}:={target}"]
    return command + (["--ros-args", *args] if args else [])


def params_file(path: Path, values: dict) -> Path:
    """The temporary parameter file launch_ros writes for a node's dict parameters."""
    lines = ["/**:", "  ros__parameters:"] + [f"    {k}: {json.dumps(v)}" for k, v in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


class Processes:
    def __init__(self, env):
        self.env, self.procs = env, {}

    def start(self, label, command):
        self.procs[label] = subprocess.Popen(command, env=self.env, cwd="/", stdout=subprocess.PIPE,
                                             stderr=subprocess.STDOUT, start_new_session=True)

    def output(self, label):
        proc = self.procs[label]
        try:
            return proc.communicate(timeout=30)[0].decode()
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.communicate()[0].decode() + "\n(killed after 30 s)"

    def stop(self, label):
        """SIGINT twice to the process group (launch and the terminal both send one)."""
        proc = self.procs[label]
        for _ in range(2):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                time.sleep(0.1)
        return self.output(label)

    def kill_all(self):
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


class Probe:
    """Episode states and command stamps per namespace, and anything on the root topics."""

    def __init__(self, context, namespaces):
        from rclpy.node import Node
        from rosgraph_msgs.msg import Clock
        from std_msgs.msg import Float64MultiArray, String

        from arm_act.ros.qos import TRANSIENT_LOCAL

        self.node = Node("launch_probe", context=context)
        self.episodes = {ns: [] for ns in namespaces}
        self.commands = {ns: [] for ns in namespaces}
        self.root = []
        for ns in namespaces:
            prefix = f"/{ns}" if ns else ""
            self.node.create_subscription(String, f"{prefix}/episode",
                                          lambda m, ns=ns: self.episodes[ns].append(json.loads(m.data)),
                                          TRANSIENT_LOCAL)
            self.node.create_subscription(Float64MultiArray, f"{prefix}/arm_controller/commands",
                                          lambda m, ns=ns: self.commands[ns].append(time.monotonic()), 100)
        if "" not in namespaces:
            self.node.create_subscription(Clock, "/clock", lambda m: self.root.append("/clock"), 10)
            self.node.create_subscription(String, "/episode", lambda m: self.root.append("/episode"), TRANSIENT_LOCAL)

    def finished(self, ns):
        return [e for e in self.episodes[ns] if e["state"] != "running"]


def _env(context):
    return dict(os.environ, ROS_DOMAIN_ID=str(context.get_domain_id()), ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
                PYTHONPATH=str(ROOT))


@pytest.mark.ros
def test_ros2_run_with_no_arguments_runs_an_episode(ros_context):
    from rclpy.executors import SingleThreadedExecutor

    procs = Processes(_env(ros_context))
    probe = Probe(ros_context, [""])
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    try:
        procs.start("sim", launch_command("sim_node"))  # terminal 1: ros2 run arm_act sim_node
        procs.start("policy", launch_command("policy_node"))  # terminal 2: ros2 run arm_act policy_node
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and not probe.finished(""):
            executor.spin_once(timeout_sec=0.1)
            for label, proc in procs.procs.items():
                assert proc.poll() is None, f"{label} exited: {procs.output(label)[-3000:]}"
        assert probe.finished(""), "no episode finished within 150 s"
        assert len(probe.commands[""]) > 50  # the arm moved: the policy commanded it
        outputs = {label: procs.stop(label) for label in ("policy", "sim")}
        for label, proc in procs.procs.items():
            assert proc.returncode == 0, outputs[label][-3000:]
            assert "Traceback" not in outputs[label], outputs[label][-3000:]
    finally:
        procs.kill_all()
        probe.node.destroy_node()
        executor.shutdown()


@pytest.mark.ros
def test_two_namespaces_side_by_side_as_launch_starts_them(ros_context, tmp_path):
    from rclpy.executors import SingleThreadedExecutor

    from arm_act.common.paths import config_file

    namespaces = {"arm1": 11, "arm2": 22}  # namespace -> seed
    procs = Processes(_env(ros_context))
    probe = Probe(ros_context, list(namespaces))
    executor = SingleThreadedExecutor(context=ros_context)
    executor.add_node(probe.node)
    remap = (("/clock", "clock"),)
    try:
        for ns, seed in namespaces.items():
            sim_yaml = params_file(tmp_path / f"sim_{ns}.yaml", {"seed": seed, "episodes": 1,
                                                                 "episode_time_limit": 8.0, "blocks": "2-3"})
            policy_yaml = params_file(tmp_path / f"policy_{ns}.yaml", {"mode": "realtime", "use_sim_time": True})
            procs.start(f"sim {ns}", launch_command("sim_node", "sim_node", ns, (config_file("sim.yaml"), sim_yaml),
                                                    remap))
            procs.start(f"policy {ns}", launch_command("policy_node", "policy_node", ns,
                                                       (config_file("policy.yaml"), policy_yaml), remap))
        deadline = time.monotonic() + 180
        services, looked = set(), 0.0
        while time.monotonic() < deadline and not all(probe.finished(ns) for ns in namespaces):
            executor.spin_once(timeout_sec=0.1)
            if time.monotonic() - looked > 1.0:  # while the sims run (they exit after their episode)
                services |= {name for name, _ in probe.node.get_service_names_and_types()}
                looked = time.monotonic()
            for ns in namespaces:
                proc = procs.procs[f"policy {ns}"]
                assert proc.poll() is None, procs.output(f"policy {ns}")[-3000:]
        for ns, seed in namespaces.items():
            (done,) = probe.finished(ns)
            assert done["seed"] == seed  # each namespace's parameters, not the other's
            assert all(e["seed"] == seed for e in probe.episodes[ns])
        # Services and nodes live in their namespace.
        for ns in namespaces:
            assert {f"/{ns}/sim_node/reset", f"/{ns}/policy_node/change_state"} <= services
        assert not probe.root, f"something was published on the root topics: {set(probe.root)}"
        rates = {}
        for ns in namespaces:
            stamps = probe.commands[ns]
            assert len(stamps) > 50, f"{ns}: {len(stamps)} commands"
            rates[ns] = round((len(stamps) - 1) / (stamps[-1] - stamps[0]), 1)
        print(f"\ncommand rates per namespace (wall clock, loaded machine): {rates}")
        # sim_node exits 0 once its episodes are done (the launch files end on that).
        for ns in namespaces:
            sim = procs.procs[f"sim {ns}"]
            sim.wait(timeout=30)
            output = procs.output(f"sim {ns}")
            assert sim.returncode == 0 and "all episodes done" in output, output[-3000:]
            output = procs.stop(f"policy {ns}")
            assert procs.procs[f"policy {ns}"].returncode == 0 and "Traceback" not in output, output[-3000:]
    finally:
        procs.kill_all()
        probe.node.destroy_node()
        executor.shutdown()
