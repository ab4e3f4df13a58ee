"""A headless Chromium screenshot of a page served on this machine (the web viewer's, in tests
and for the screenshots in docs/).

Chromium's own --screenshot fires at the page's load event, long before the viewer's Wasm has
compiled and drawn the recording. So this module drives Chromium over the DevTools protocol on
a pipe (--remote-debugging-pipe: JSON messages ended by a NUL byte, commands on the child's
fd 3, replies on its fd 4) and takes the screenshot itself: after `wait_s`, or, given `ready`,
as soon as a screenshot taken every `poll_s` satisfies it (at most `wait_s`). The web viewer
draws with WebGL; without a GPU Chromium renders it with SwiftShader (software).
"""
from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--enable-unsafe-swiftshader", "--use-angle=swiftshader", "--hide-scrollbars")
_COMMANDS_FD, _REPLIES_FD = 3, 4  # where Chromium's --remote-debugging-pipe expects them


def find_chromium() -> str | None:
    """The path of an installed Chromium, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


class _DevTools:
    """One Chromium process and its DevTools pipe: send a command, wait for its reply."""

    def __init__(self, command: list[str]):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()

        def child_fds():  # in the child: the pipe ends where Chromium looks for them
            high = [os.dup(fd) for fd in (commands_read, replies_write)]  # out of the way of 3 and 4
            os.dup2(high[0], _COMMANDS_FD)
            os.dup2(high[1], _REPLIES_FD)

        # Chromium's output goes to a file, so a chatty Chromium never blocks on a full pipe.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=self._log, pass_fds=(_COMMANDS_FD, _REPLIES_FD),
                                        preexec_fn=child_fds)
        os.close(commands_read)
        os.close(replies_write)
        self._buffer = b""
        self._next_id = 0

    def call(self, method: str, params: dict | None = None, session: str | None = None,
             timeout_s: float = 60.0) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        try:
            os.write(self._commands, json.dumps(message).encode() + b"\0")
        except BrokenPipeError:  # it has exited already: say so, as a closed reply pipe does
            raise self._exited() from None
        deadline = time.monotonic() + timeout_s
        while True:
            reply = self._read(deadline, method)
            if reply.get("id") == self._next_id:  # anything else is an event: not asked for
                if "error" in reply:
                    raise RuntimeError(f"chromium: {method}: {reply['error'].get('message', reply['error'])}")
                return reply.get("result", {})

    def _read(self, deadline: float, method: str) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"chromium did not answer {method}")
            if select.select([self._replies], [], [], left)[0]:
                chunk = os.read(self._replies, 1 << 20)
                if not chunk:
                    raise self._exited()
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def _exited(self) -> RuntimeError:
        self._log.seek(0)
        tail = " | ".join(self._log.read().decode(errors="replace").strip().splitlines()[-3:])
        return RuntimeError(f"chromium exited with {self.process.wait()}: {tail}")

    def close(self) -> None:
        """Ask Chromium to close (its renderers go with it), then kill it if it has not."""
        if self.process.poll() is None:
            try:
                self.call("Browser.close", timeout_s=5.0)
            except (RuntimeError, TimeoutError):
                pass  # it exited already or did not answer: the kill below
            try:
                self.process.wait(timeout=10.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.wait()
        for fd in (self._commands, self._replies):
            os.close(fd)
        self._log.close()


def _first_page(browser: _DevTools, timeout_s: float = 30.0) -> dict:
    """The target of the tab Chromium opened at start (it may not exist yet when the pipe answers)."""
    deadline = time.monotonic() + timeout_s
    while True:
        pages = [t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page"]
        if pages:
            return pages[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"chromium opened no page within {timeout_s:.0f} s")
        time.sleep(0.1)


def screenshot(url: str, out: Path, *, width: int = 1600, height: int = 900, wait_s: float = 25.0,
               ready: Callable[[np.ndarray], bool] | None = None, poll_s: float = 1.0,
               chromium: str | None = None) -> Path:
    """Load `url` in headless Chromium and write a PNG of its width x height window to `out`:
    taken after `wait_s`, or, with `ready` (a function of the screenshot as a BGR image), the
    first screenshot it accepts, taken every `poll_s` (the last one at `wait_s` if none is)."""
    import cv2

    chromium = chromium or find_chromium()
    if chromium is None:
        raise FileNotFoundError("no Chromium installed (apt-get install chromium)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="arm_act_chromium_")
    browser = _DevTools([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                         f"--window-size={width},{height}", url])
    try:  # the page opened from the command line: attaching after a navigation would lose it
        page = _first_page(browser)
        session = browser.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True})["sessionId"]
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session)
        opened = time.monotonic()
        while True:
            last = time.monotonic() - opened >= wait_s
            if ready is None and not last:
                time.sleep(max(0.0, wait_s - (time.monotonic() - opened)))
                continue
            png = base64.b64decode(browser.call("Page.captureScreenshot", {"format": "png"}, session)["data"])
            if last or ready(cv2.imdecode(np.frombuffer(png, np.uint8), cv2.IMREAD_COLOR)):
                out.write_bytes(png)
                return out
            time.sleep(poll_s)
    finally:
        browser.close()
        shutil.rmtree(profile, ignore_errors=True)
