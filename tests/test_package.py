"""Packaging: the ROS-free cores import without rclpy, the launch files name only
executables and parameter files that exist, and colcon builds the workspace."""
import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize("package", ["sim", "policy"])
def test_core_imports_without_ros(package):
    # A meta-path hook makes any ROS import, and any import of the rest of arm_act (the other
    # core included), fail; then every module of the core is imported.
    other = {"sim": "policy", "policy": "sim"}[package]
    code = f"""
import importlib, pkgutil, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        parts = name.split('.')
        ros = parts[0] in ('rclpy', 'rosbags', 'builtin_interfaces') or parts[0].endswith(('_msgs', '_srvs'))
        upward = parts[0] == 'arm_act' and len(parts) > 1 and parts[1] != '{package}'
        if ros or upward:
            raise ImportError('import from the ROS-free core arm_act.{package}: ' + name)
sys.meta_path.insert(0, Block())
import arm_act.{package} as core
for info in pkgutil.iter_modules(core.__path__):
    importlib.import_module('arm_act.{package}.' + info.name)
assert 'arm_act.{other}' not in sys.modules
print('ok')
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ok" in out.stdout


def _setup_entry_points():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    return {ast.literal_eval(v).split("=")[0].strip() for v in value.elts}
    raise AssertionError("no console_scripts in setup.py")


@pytest.mark.parametrize("launch_file", sorted((ROOT / "launch").glob("*.launch.py")), ids=lambda p: p.name)
def test_launch_file_names_existing_executables_and_configs(launch_file):
    source = launch_file.read_text()
    tree = ast.parse(source)  # parses: no syntax errors
    executables, configs = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "executable":
            executables.add(ast.literal_eval(node.value))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.endswith(".yaml"):
            configs.add(node.value)
    assert executables, "a launch file without nodes"
    assert executables <= _setup_entry_points()
    for config in configs:
        assert (ROOT / "config" / config).is_file(), config
    assert "generate_launch_description" in source


def test_package_xml_declares_every_ros_package_used():
    xml = (ROOT / "package.xml").read_text()
    used = set()
    for path in ROOT.glob("arm_act/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                used.add(node.module.split(".")[0])
            elif isinstance(node, ast.Import):
                used.update(alias.name.split(".")[0] for alias in node.names)
    ros = {name for name in used if name.endswith(("_msgs", "_srvs")) or name in ("rclpy", "builtin_interfaces")}
    assert ros, "found no ROS imports at all"
    for name in ros:
        assert f"<exec_depend>{name}</exec_depend>" in xml, name


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("colcon", path=os.path.dirname(sys.executable)) is None, reason="colcon not installed")
def test_colcon_build_installs_the_executables(tmp_path):
    colcon = shutil.which("colcon", path=os.path.dirname(sys.executable))
    workspace = ROOT / "ros2_ws"
    assert (workspace / "src" / "arm_act" / "package.xml").is_file()
    out = subprocess.run(
        [colcon, "--log-base", str(tmp_path / "log"), "build", "--base-paths", str(workspace / "src"),
         "--build-base", str(tmp_path / "build"), "--install-base", str(tmp_path / "install")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lib = tmp_path / "install" / "arm_act" / "lib" / "arm_act"
    for executable in ("sim_node", "policy_node", "expert_node", "bag_recorder", "arm-act"):
        assert (lib / executable).is_file(), executable
    share = tmp_path / "install" / "arm_act" / "share"
    assert (share / "ament_index" / "resource_index" / "packages" / "arm_act").is_file()
    assert (share / "arm_act" / "launch" / "bringup.launch.py").is_file()
    for config in (ROOT / "config").iterdir():
        assert (share / "arm_act" / "config" / config.name).is_file(), config.name
    # Every layer of arm_act, the linked sim/ and policy/ included, is installed as a package.
    site = next((tmp_path / "install" / "arm_act" / "lib").glob("python3*/site-packages"))
    for layer in sorted(p for p in (ROOT / "arm_act").iterdir() if (p / "__init__.py").is_file()):
        assert (site / "arm_act" / layer.name / "__init__.py").is_file(), layer.name
    # The Fast DDS profile the executables hand to rmw (arm_act/ros/transport.py).
    assert (site / "arm_act" / "ros" / "fastdds_udp_loopback.xml").is_file()
