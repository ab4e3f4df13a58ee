"""Where a recording goes: an .rrd file, the web viewer served from this machine, a native viewer.

The web viewer is Rerun's own: its command-line binary (shipped in the rerun-sdk wheel)
hosts the viewer's HTML/Wasm over HTTP and a gRPC proxy that buffers the recording for
viewers that connect later, both bound to 127.0.0.1, so nothing leaves the machine and no
account is needed. (The SDK's serve_grpc/serve_web_viewer functions bind every interface,
0.0.0.0, with no way to choose.) The page is http://127.0.0.1:<web port>/?url=<gRPC url>.
"""
from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid
import weakref
from pathlib import Path

import rerun as rr

import arm_act.view.layout as L

logger = logging.getLogger(__name__)

DEFAULT_WEB_PORT = 9090
SERVER_MEMORY_LIMIT = "2GiB"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class ViewerError(RuntimeError):
    """A viewer output that cannot be opened (no binary, port taken, server died)."""


def rerun_binary() -> Path:
    """The `rerun` executable inside the rerun-sdk wheel (not the Python wrapper script)."""
    import rerun_cli

    path = Path(rerun_cli.__file__).parent / "rerun"
    if not path.exists():
        raise ViewerError(f"the rerun binary is missing from the rerun-sdk install ({path})")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_taken(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


# Loaded here, not in the child: between fork and exec the child should run as little Python
# as possible (other threads' locks are not released there).
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, ask the kernel to send SIGTERM when the parent
    dies, so a viewer killed by a signal (SIGTERM, SIGKILL) leaves no server behind."""
    if _LIBC is not None:
        _LIBC.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))


def _stop_process(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5.0)


class WebViewer:
    """Rerun's web viewer and gRPC proxy as a child process on 127.0.0.1 (a context manager).

    url: the page to open in a browser; grpc_url: where recordings are sent (open_recording).
    """

    def __init__(self, web_port: int = DEFAULT_WEB_PORT, grpc_port: int | None = None,
                 memory_limit: str = SERVER_MEMORY_LIMIT, startup_timeout_s: float = 20.0):
        self.web_port = int(web_port) if web_port else free_port()
        # With a chosen web port the gRPC port is the next one, so both are known in advance
        # (to forward them over SSH, say); with port 0 both are any free ports.
        self.grpc_port = int(grpc_port) if grpc_port else (self.web_port + 1 if web_port else free_port())
        for port in (self.web_port, self.grpc_port):
            if _port_taken(port):
                raise ViewerError(f"port {port} on 127.0.0.1 is in use (choose another with --port)")
        self.grpc_url = f"rerun+http://127.0.0.1:{self.grpc_port}/proxy"
        self.url = f"http://127.0.0.1:{self.web_port}/?url={urllib.parse.quote(self.grpc_url, safe='')}"
        command = [str(rerun_binary()), "--serve-web", "--bind", "127.0.0.1", "--port", str(self.grpc_port),
                   "--web-viewer-port", str(self.web_port), "--server-memory-limit", memory_limit]
        self._log = open(os.devnull, "wb")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                        start_new_session=True,  # Ctrl-C in a terminal reaches us, not it
                                        preexec_fn=_die_with_parent)
        # Whatever way this process ends (an exception, no close()), the server ends with it.
        self._finalizer = weakref.finalize(self, _stop_process, self.process)
        deadline = time.monotonic() + startup_timeout_s
        while not (_listening(self.web_port) and _listening(self.grpc_port)):
            if self.process.poll() is not None:
                self.close()
                raise ViewerError(f"the rerun web viewer exited at start (status {self.process.returncode})")
            if time.monotonic() > deadline:
                self.close()
                raise ViewerError(f"the rerun web viewer did not listen within {startup_timeout_s:.0f} s")
            time.sleep(0.05)

    def close(self) -> None:
        """Stop the server; idempotent."""
        self._finalizer()
        self._log.close()

    def __enter__(self) -> WebViewer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_recording(name: str, *, save: Path | None = None, web: WebViewer | None = None,
                   spawn: bool = False, cameras=L.CAMERAS, recording_id: str | None = None,
                   attention: str = "queries") -> rr.RecordingStream:
    """A recording of application `arm_act` named `name`, streamed into the .rrd file `save`,
    the web viewer `web` and/or a native viewer (spawn; needs a display), with the layout
    (its camera tab `attention`, layout.ATTENTION_TABS). With none of them it stays in memory
    (rerun buffers it)."""
    rec = rr.RecordingStream(L.APPLICATION_ID, recording_id=recording_id or str(uuid.uuid4()))
    sinks = []
    if save is not None:
        save = Path(save)
        save.parent.mkdir(parents=True, exist_ok=True)
        sinks.append(rr.FileSink(str(save)))
    if web is not None:
        sinks.append(rr.GrpcSink(web.grpc_url))
    blueprint = L.blueprint(cameras, attention)
    if spawn:
        rec.spawn(default_blueprint=blueprint)  # a native viewer on a free port, then connected
        if sinks:
            logger.warning("a native viewer and other outputs at once: only the native viewer gets the recording")
    elif sinks:
        rec.set_sinks(*sinks, default_blueprint=blueprint)
    rec.send_recording_name(name)
    return rec
