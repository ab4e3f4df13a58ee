"""Progress bars for long commands: tqdm on a terminal (stderr), quiet otherwise, so
`--json` output and logs stay clean."""
from __future__ import annotations

import sys
from contextlib import contextmanager


@contextmanager
def progress_bar(total: int, desc: str, unit: str = "it", force: bool | None = None):
    """A tqdm bar on stderr when it is a terminal (or force=True); otherwise a bar that
    draws nothing but still counts."""
    from tqdm import tqdm

    enabled = sys.stderr.isatty() if force is None else force
    bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=not enabled, dynamic_ncols=True)
    try:
        yield bar
    finally:
        bar.close()
