"""The web viewer in a real browser: `arm-act view --web`'s server (Rerun's web viewer and gRPC
proxy on 127.0.0.1) shows a recorded episode, and a headless Chromium screenshot of it is not
blank and shows the layout's panels (cameras, 3D scene, plots). Skipped, saying why, where no
Chromium is installed (.ci/run installs Debian's)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from arm_act.cli import main as cli
from arm_act.view import WebViewer, replay_bag
from arm_act.view.browser import find_chromium, screenshot

pytestmark = pytest.mark.e2e

WIDTH, HEIGHT = 1600, 900


@pytest.fixture(scope="module")
def episode_bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("collect") / "demos"
    assert cli.main(["collect", "--episodes", "1", "--blocks", "3", "--seed", "5", "--out", str(out)]) == 0
    return out / "episode_5"


def _busy_tiles(image: np.ndarray, rows: int = 3, cols: int = 4, min_std: float = 6.0) -> int:
    """How many tiles of a rows x cols grid hold more than a flat colour."""
    h, w = image.shape[:2]
    return sum(float(image[r * h // rows:(r + 1) * h // rows, c * w // cols:(c + 1) * w // cols].std()) > min_std
               for r in range(rows) for c in range(cols))


def _table_share(image: np.ndarray) -> float:
    """The share of the 3D view's area (middle columns, above the time panel) in the table's
    warm grey-brown."""
    b, g, r = (image[:, :, i].astype(int) for i in range(3))
    table = (r > g) & (g > b) & (r - b > 15) & (r > 110)
    return float(table[: HEIGHT * 3 // 4, WIDTH // 4: WIDTH * 3 // 4].mean())


def _drawn(image: np.ndarray) -> bool:
    return float(image.std()) > 20.0 and _busy_tiles(image) >= 9 and _table_share(image) > 0.05


def test_web_viewer_shows_the_recorded_episode(episode_bag, tmp_path):
    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium installed (apt-get install chromium; .ci/run installs it)")
    with WebViewer(0) as web:
        assert web.url.startswith("http://127.0.0.1:")
        result = replay_bag(episode_bag, web=web)
        assert result.messages > 1000
        # Screenshots every second until the viewer has drawn its layout (the checks below), for
        # at most a minute: a loaded machine compiles the viewer's Wasm more slowly.
        png = screenshot(web.url, tmp_path / "viewer.png", width=WIDTH, height=HEIGHT, wait_s=60.0,
                         ready=_drawn, chromium=chromium)
    image = cv2.imread(str(png))
    assert image is not None and image.shape[:2] == (HEIGHT, WIDTH)
    assert float(image.std()) > 20.0, "the screenshot is (nearly) one colour"
    # The loading screen is a dark page with one line of text in the middle: 1-2 busy tiles.
    # The layout fills the window with views: cameras, the 3D scene, plots, the time panel.
    busy = _busy_tiles(image)
    assert busy >= 9, f"only {busy} of 12 regions hold anything: the viewer did not draw its panels"
    # The 3D view (middle column) draws the table: a large area of its warm grey-brown.
    assert _table_share(image) > 0.05, "no table in the 3D view"


def test_a_browser_that_exits_at_once_is_one_clear_error(tmp_path):
    # Any executable stands in for Chromium: one that ignores the DevTools pipe and exits 3.
    fake = tmp_path / "fake-chromium"
    fake.write_text("#!/bin/sh\necho 'no display, no luck' >&2\nexit 3\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match=r"^chromium exited with 3: no display, no luck$"):
        screenshot("http://127.0.0.1:9/", tmp_path / "shot.png", wait_s=5.0, chromium=str(fake))
    assert not (tmp_path / "shot.png").exists()
