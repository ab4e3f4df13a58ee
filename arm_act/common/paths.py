"""Where the package's data lives: the ament share directory in a ROS install (colcon),
the repository itself when run from a checkout or its virtual environment."""
from __future__ import annotations

from pathlib import Path

PACKAGE = "arm_act"
REPO_ROOT = Path(__file__).resolve().parents[2]  # arm_act/common/paths.py -> the repository


def share_directory() -> Path:
    """share/arm_act of an installed package, else the repository root."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return REPO_ROOT
    try:
        share = Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, ValueError, LookupError, OSError):  # OSError: no AMENT_PREFIX_PATH
        return REPO_ROOT
    return share if (share / "checkpoints").is_dir() else REPO_ROOT


def default_checkpoint() -> Path:
    """The shipped policy."""
    return share_directory() / "checkpoints" / "default"


def config_file(name: str) -> Path:
    return share_directory() / "config" / name
