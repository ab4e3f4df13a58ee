"""Node executables as child processes (`arm-act demo`, `arm-act bench`): started the way
launch starts them, stopped in order (SIGINT, then SIGTERM, then SIGKILL)."""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the parent dies (Linux prctl), so a parent
    killed without cleaning up leaves no nodes behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def ros_args(params: dict, params_file: Path | None = None) -> list[str]:
    """['--ros-args', '--params-file', FILE, '-p', 'key:=value', ...]. rcl reads each value
    as YAML, so a str is single-quoted: "6", "true" or "1e3" would otherwise arrive as a
    number or a bool, and a string parameter refuses them."""
    args = ["--ros-args"]
    if params_file is not None:
        args += ["--params-file", str(params_file)]
    for key, value in params.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, str):
            value = "'" + value.replace("'", "''") + "'"
        args += ["-p", f"{key}:={value}"]
    return args


class NodeProcesses:
    """`python -m <module> --ros-args ...` children in their own sessions (a terminal's
    Ctrl-C reaches only the parent, which stops them in order). With `logs`, each child's
    output goes to logs/<name>.log; otherwise it shares the parent's terminal."""

    def __init__(self, logs: Path | None = None):
        self.logs = logs
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, module: str, args: list[str], env: dict) -> None:
        command = [sys.executable, "-m", module, *args]
        options = dict(env=env, start_new_session=True, preexec_fn=die_with_parent)
        if self.logs is None:
            proc = subprocess.Popen(command, **options)
        else:
            with open(self.logs / f"{name}.log", "wb") as log:
                proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=subprocess.STDOUT, **options)
        self.procs.append((name, proc))

    def failed(self) -> str | None:
        """'<name> exited with status N[: last log lines]' for the first child that exited."""
        for name, proc in self.procs:
            if proc.poll() is not None:
                detail = f": {self.tail(name)}" if self.logs is not None else ""
                return f"{name} exited with status {proc.returncode}{detail}"
        return None

    def check(self) -> None:
        problem = self.failed()
        if problem:
            raise RuntimeError(problem)

    def tail(self, name: str, lines: int = 5) -> str:
        if self.logs is None:
            return "(output on the terminal)"
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return " | ".join(text[-lines:]) or "(empty log)"

    def stop(self) -> None:
        for sig, wait in ((signal.SIGINT, 5.0), (signal.SIGTERM, 3.0), (signal.SIGKILL, 2.0)):
            alive = [proc for _, proc in self.procs if proc.poll() is None]
            for proc in alive:
                proc.send_signal(sig)
            deadline = time.monotonic() + wait
            for proc in alive:
                try:
                    proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
