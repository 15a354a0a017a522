"""One child process timed alone, as the benches compare commands: wall, CPU (user + system) and peak RSS."""
from __future__ import annotations

import os
import subprocess
import sys
import time


def timed_child(cmd: list[str], label: str) -> dict:
    """Run `cmd` and measure it from wait4 (the child's own rusage); a failing child ends the bench with its
    stderr's tail."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out, err = p.stdout.read(), p.stderr.read()
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        sys.stderr.write(f"{label} failed ({rc}):\n{err[-3000:]}\n")
        raise SystemExit(2)
    return {"label": label, "wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024,
            "stdout": out}
