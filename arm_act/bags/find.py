"""Which bags a list of paths names: one rule for training (`arm-act train --data`) and
reports (`arm-act report`).

A bag is a directory that holds metadata.yaml, .mcap files, or the writer's marker
(codec.MARKER_NAME: a bag still open or left incomplete by a writer that died). Each path
given is
- a bag: that bag;
- an .mcap file: the bag directory holding it;
- any other directory: every bag at or under it, at any depth; hidden directories
  (".name") are skipped and a bag's own subdirectories are not searched (a bag holds no
  bags).
Incomplete bags are found like complete ones: whether to use them is the caller's choice
(training skips them with a warning; `arm-act report` refuses them unless
--allow-incomplete). The result is sorted by resolved path, each bag once, so the order of
training data does not depend on the order of the arguments.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from arm_act.bags.codec import MARKER_NAME, BagError


def is_bag(directory: Path) -> bool:
    """Whether `directory` is a bag directory (see the module docstring)."""
    directory = Path(directory)
    return directory.is_dir() and ((directory / "metadata.yaml").is_file() or (directory / MARKER_NAME).is_file()
                                   or any(directory.glob("*.mcap")))


def _bags_under(root: Path) -> list[Path]:
    found = []
    for current, subdirs, _files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        for name in list(subdirs):
            path = Path(current) / name
            if is_bag(path):
                found.append(path)
                subdirs.remove(name)  # a bag holds no bags
    return found


def find_bags(paths: Iterable[str | os.PathLike]) -> list[Path]:
    """The bags the paths name (module docstring). Raises BagError for a path that does
    not exist, a file that is not an .mcap file, or a directory with no bag at or under it."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise BagError(f"{path}: no such bag or directory")
        if path.is_file():
            if path.suffix != ".mcap":
                raise BagError(f"{path}: not a bag (a bag is a directory with metadata.yaml or .mcap files)")
            found.append(path.parent)
        elif is_bag(path):
            found.append(path)
        else:
            under = _bags_under(path)
            if not under:
                raise BagError(f"{path}: not a bag and no bags under it (a bag is a directory with "
                               "metadata.yaml or .mcap files)")
            found.extend(under)
    unique = sorted({p.resolve(): p for p in found}.items())
    return [p for _, p in unique]
