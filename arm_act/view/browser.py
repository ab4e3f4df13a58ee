"""A headless Chromium screenshot of a page served on this machine (the web viewer's, in tests
and for the screenshots in docs/).

Chromium's --screenshot fires at the page's load event, long before the viewer's Wasm has
compiled and drawn the recording. So the browser opens a small local page holding the viewer
in a full-window iframe plus one image that this module's HTTP server answers only after
`wait_s`: the load event, and so the screenshot, waits until then. The web viewer draws with
WebGL; without a GPU Chromium renders it with SwiftShader (software).
"""
from __future__ import annotations

import html
import shutil
import subprocess
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--hide-scrollbars")
# The smallest valid PNG (1x1), the delayed image's body.
_PIXEL = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                       "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082")


def find_chromium() -> str | None:
    """The path of an installed Chromium, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _wrapper_server(url: str, wait_s: float) -> ThreadingHTTPServer:
    page = (f'<!doctype html><html><body style="margin:0;overflow:hidden;background:#000">'
            f'<iframe src="{html.escape(url)}" style="border:0;position:fixed;inset:0;width:100%;height:100%">'
            f'</iframe><img src="/wait.png" style="display:none"></body></html>').encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.startswith("/wait.png"):
                time.sleep(wait_s)
                body, kind = _PIXEL, "image/png"
            else:
                body, kind = page, "text/html"
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def screenshot(url: str, out: Path, *, width: int = 1600, height: int = 900, wait_s: float = 25.0,
               chromium: str | None = None, timeout_s: float = 180.0) -> Path:
    """Load `url` in headless Chromium, wait `wait_s`, write a PNG of the window to `out`."""
    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no Chromium installed (apt-get install chromium)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    server = _wrapper_server(url, wait_s)
    profile = tempfile.mkdtemp(prefix="arm_act_chromium_")
    try:
        command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--screenshot={out.resolve()}",
                   f"--window-size={width},{height}", f"http://127.0.0.1:{server.server_address[1]}/"]
        result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s)
        if result.returncode != 0 or not out.exists():
            tail = result.stderr.strip().splitlines()[-3:]
            raise RuntimeError(f"chromium exited with {result.returncode}: {' | '.join(tail)}")
    finally:
        server.shutdown()
        server.server_close()
        shutil.rmtree(profile, ignore_errors=True)
    return out
