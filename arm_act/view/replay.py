"""Recorded bags (demo, bringup, collect or eval bags) replayed into Rerun on the live layout.

Each bag becomes one recording (named after the bag, its seed and its outcome) of the
application `arm_act`, so several bags show as a list of recordings sharing one layout. The
messages go through the same RunLogger as the live view, at their recorded sim time.
"""
from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import arm_act.view.layout as L
from arm_act.bags import BagError, BagInfo, bag_info, find_bags, read_bag
from arm_act.view.sinks import ViewerError, WebViewer, open_recording

logger = logging.getLogger(__name__)

_CAMERA_TOPIC = re.compile(r"(?:^|/)camera/([^/]+)/image_raw$")  # under any namespace
REPLAY_FLUSH_S = 1.0  # wall seconds between column sends while replaying


@dataclass
class ReplayResult:
    bag: Path
    name: str
    messages: int  # messages read from the bag
    logged: dict[str, int] = field(default_factory=dict)  # rows logged per entity path
    skipped: int = 0  # messages that could not be shown (malformed)
    rrd: Path | None = None
    problem: str | None = None  # why the bag is incomplete, when it is


def recording_name(bag: Path, custom: dict[str, str]) -> str:
    parts = [bag.name]
    if "seed" in custom:
        parts.append(f"seed {custom['seed']}")
    if "status" in custom:
        parts.append(custom["status"])
    return ", ".join(parts)


def cameras_of(topics: Iterable[str]) -> tuple[str, ...]:
    """Camera names of a bag's image topics, in the live system's order where it has them."""
    names = [m.group(1) for m in (_CAMERA_TOPIC.search(t) for t in topics) if m]
    known = [c for c in L.CAMERAS if c in names]
    return tuple(known + sorted(set(names) - set(known)))


def check_bag(bag: Path) -> BagInfo:
    """bag_info of a bag worth showing; BagError (one line) for what is not a bag, cannot be
    read, or holds no messages."""
    try:
        info = bag_info(bag)
    except BagError:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged file can trip any parser below bag_info: say which bag, in one line
        raise BagError(f"{bag}: cannot read the bag ({type(exc).__name__}: {exc})") from None
    if info.message_count == 0:
        raise BagError(f"{bag}: the bag holds no messages" + (f" ({info.problem})" if info.problem else ""))
    return info


def replay_bag(bag: str | os.PathLike, *, save: Path | None = None, web: WebViewer | None = None,
               spawn: bool = False, kinematics=None, attention: str = "queries") -> ReplayResult:
    """Log one bag into a recording sent to `save` (.rrd), `web` and/or a native viewer;
    kinematics: a PandaKinematics to share between bags (else one is made); attention: the
    camera tab shown first (layout.ATTENTION_TABS)."""
    from arm_act.view.logger import RunLogger  # PyBullet (and its banner) only once there is a bag to show

    bag = Path(bag)
    info = check_bag(bag)
    if info.problem:
        logger.warning("%s is incomplete (%s): showing what it holds", bag, info.problem)
    cameras = cameras_of(info.topics) or L.CAMERAS
    name = recording_name(bag, info.custom_data)
    rec = open_recording(name, save=save, web=web, spawn=spawn, cameras=cameras, attention=attention)
    # A bag is read in a few seconds: send its high-rate rows in a few large chunks, which the
    # viewer ingests much faster than the live view's many small ones (5 per second).
    run = RunLogger(rec, cameras, kinematics, flush_interval_s=REPLAY_FLUSH_S)
    messages = 0
    try:
        for message in read_bag(bag, allow_incomplete=True):
            run.handle(message.topic, message.timestamp_ns, message.msg)
            messages += 1
    except BagError:
        raise
    except Exception as exc:  # noqa: BLE001 - as in check_bag: a damaged record deep in the file
        raise BagError(f"{bag}: cannot read the bag after {messages} messages ({type(exc).__name__}: {exc})") from None
    finally:
        run.close()
        rec.disconnect()  # ends the .rrd (footer and manifest); the web viewer's proxy keeps what it got
    if messages == 0:
        raise BagError(f"{bag}: no message could be read" + (f" ({info.problem})" if info.problem else ""))
    return ReplayResult(bag, name, messages, dict(run.counts), run.skipped, save, info.problem)


def _save_path(save: Path | None, bag: Path, many: bool) -> Path | None:
    if save is None:
        return None
    if many or save.suffix != ".rrd":
        return save / f"{bag.name}.rrd"  # a folder of recordings, one per bag
    return save


def view_bags(paths: Sequence[str | os.PathLike], *, save: Path | None = None, web: bool = False,
              port: int | None = None, spawn: bool = False, report: Callable[[str], None] = print,
              serve_s: float | None = None, attention: str = "queries") -> list[ReplayResult]:
    """Replay bags into `save` (one .rrd for one bag, else a folder with one per bag), the web
    viewer on 127.0.0.1:`port` (served until Ctrl-C, or for serve_s seconds), and/or a native
    viewer, its camera tab `attention` first (layout.ATTENTION_TABS). `report` receives the
    lines to show the user (the web viewer's address first)."""
    bags = find_bags(paths)
    for bag in bags:
        check_bag(bag)
    if not (save or web or spawn):
        raise ViewerError("nothing to show the bags in: ask for --save, --web or a native viewer")
    save = None if save is None else Path(save)
    if save is not None and save.exists() and save.is_file() and len(bags) == 1:
        raise ViewerError(f"{save} exists already")
    server = WebViewer(port or 0) if web else None
    from arm_act.view.kinematics import PandaKinematics

    results = []
    kinematics = PandaKinematics()
    try:
        if server is not None:
            report(f"web viewer: {server.url}")
        for bag in bags:
            result = replay_bag(bag, save=_save_path(save, bag, len(bags) > 1), web=server, spawn=spawn,
                                kinematics=kinematics, attention=attention)
            results.append(result)
            report(f"{result.name}: {result.messages} messages" + (f" -> {result.rrd}" if result.rrd else ""))
        if server is not None:
            _serve(server, serve_s, report)
    finally:
        kinematics.close()
        if server is not None:
            server.close()
    return results


def _serve(server: WebViewer, serve_s: float | None, report: Callable[[str], None]) -> None:
    report(f"serving {server.url} (Ctrl-C stops)" if serve_s is None else f"serving for {serve_s:.0f} s")
    deadline = None if serve_s is None else time.monotonic() + serve_s
    try:
        while deadline is None or time.monotonic() < deadline:
            if server.process.poll() is not None:
                raise ViewerError(f"the web viewer stopped (status {server.process.returncode})")
            time.sleep(0.2)
    except KeyboardInterrupt:
        report("stopped")
