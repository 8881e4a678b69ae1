"""`python -m t2t_repro.serve` in a child process on 127.0.0.1, for benchmarks and tests.

`LocalServer` picks a free port (`--port=0`), waits for the server's ready line and always
stops the process, on errors and Ctrl-C too.
"""

import collections
import re
import subprocess
import sys
import threading

HOST = "127.0.0.1"
STARTUP_TIMEOUT_S = 300
STOP_TIMEOUT_S = 10
READY_LINE = re.compile(r"Serving model \S+ version (\S+) at http://\S+?:(\d+)/v1/models/")


class LocalServer:
    """The server started with `flags` (beside --host and --port), as a context manager giving
    itself once the server is ready: `port`, `version`, `url`, `resident_mib()`. Its output is
    drained (a full pipe would block it), keeping the last lines for error messages."""

    def __init__(self, flags):
        self.process = subprocess.Popen(
            [sys.executable, "-m", "t2t_repro.serve", f"--host={HOST}", "--port=0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace")
        self.tail = collections.deque(maxlen=40)
        self.ready = threading.Event()
        self.version = self.port = None
        threading.Thread(target=self._drain, daemon=True).start()

    @property
    def url(self):
        return f"http://{HOST}:{self.port}"

    def _drain(self):
        for line in self.process.stdout:
            self.tail.append(line.rstrip("\n"))
            match = not self.ready.is_set() and READY_LINE.search(line)
            if match:
                self.version, self.port = match.group(1), int(match.group(2))
                self.ready.set()
        self.ready.set()  # output ended: the server exited before or after being ready

    def __enter__(self):
        try:
            if not self.ready.wait(STARTUP_TIMEOUT_S):
                raise SystemExit(f"error: the server printed no ready line in "
                                 f"{STARTUP_TIMEOUT_S} s:\n{self.output()}")
            self.check_running()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info):
        self.stop()

    def check_running(self):
        """Exits with the server's last output when it is not running (or never got ready)."""
        if self.port is not None and self.process.poll() is None:
            return
        self.stop()
        raise SystemExit(f"error: the server exited (status {self.process.returncode}):\n"
                         f"{self.output()}")

    def output(self):
        """The server's last lines of output, indented."""
        return "\n".join(f"  | {line}" for line in self.tail)

    def resident_mib(self, field="VmRSS"):
        """The server process's resident memory in MiB: now (VmRSS) or its peak (VmHWM); None
        where /proc has no such figure."""
        try:
            with open(f"/proc/{self.process.pid}/status") as status:
                for line in status:
                    if line.startswith(f"{field}:"):
                        return int(line.split()[1]) / 1024
        except OSError:
            pass
        return None

    def stop(self):
        """Terminates the server (killed after STOP_TIMEOUT_S) and waits for it."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
