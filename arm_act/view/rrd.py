"""Reading an .rrd back with Rerun's own reader: what a recording holds, per entity path."""
from __future__ import annotations

import os
from pathlib import Path

from rerun.chunk import RrdReader

from arm_act.view import layout as L


def rrd_rows(path: str | os.PathLike, timeline: str = L.TIMELINE) -> dict[str, int]:
    """{entity path (without the leading '/'): rows on `timeline`} of the first recording."""
    rows: dict[str, int] = {}
    for chunk in RrdReader(Path(path)).stream():
        if chunk.is_static or timeline not in chunk.timeline_names:
            continue
        entity = chunk.entity_path.lstrip("/")
        rows[entity] = rows.get(entity, 0) + chunk.num_rows
    return rows


def rrd_static_entities(path: str | os.PathLike) -> set[str]:
    """Entity paths holding static data (scene, meshes, styles) in the first recording."""
    return {chunk.entity_path.lstrip("/") for chunk in RrdReader(Path(path)).stream() if chunk.is_static}
