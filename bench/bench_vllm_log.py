"""Speed of the vLLM log ingest against a plain `for line in f: re.match(...)` parser, side by side, on ≥ 1 GB.

The input is the real 0.8.3 server log (../shared/real/vllm/, 800 requests) repeated until it passes the target
size, each copy re-timestamped forward (so time keeps increasing) and with its request ids made unique. The
copy is built with numpy (the template's timestamp and id bytes are overwritten in place per copy) and cached in
a temp dir between runs. Each contender runs in its own subprocess; its peak RSS is read by the process that
started it with `resource.getrusage(RUSAGE_CHILDREN)`.

    .venv/bin/python bench/bench_vllm_log.py [--gb 1.0] [--dir /tmp/stallscope-bench] [--keep-db]
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SOURCE = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real")) / "vllm" / \
    "v0_0.8.3_ray_tp4pp2_llama70b_full_server_log_800req_llmk8s.log"
YEAR = 2025  # the source log's year (its Ray lines say 2025-04-14)


# -- building the input --------------------------------------------------------------------------------------

def _template(data: bytes):
    """Byte positions of every timestamp and request id in the template, and the instants of the timestamps."""
    vllm_ts = [(m.start(1), m.group(1)) for m in
               re.finditer(rb"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d:\d\d) ", data)]
    ray_ts = [(m.start(1), m.group(1)) for m in re.finditer(rb"(?m)^(?:\x1b\[[0-9;]*m)?(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),", data)]
    ids = [m.start(1) for m in re.finditer(rb"(?:chatcmpl|cmpl)-([0-9a-f]{32})", data)]
    v_secs = np.array([dt.datetime.strptime(f"{YEAR}-{s.decode()}", "%Y-%m-%d %H:%M:%S")
                       .replace(tzinfo=dt.timezone.utc).timestamp() for _, s in vllm_ts], dtype=np.int64)
    r_secs = np.array([dt.datetime.strptime(s.decode(), "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc).timestamp()
                       for _, s in ray_ts], dtype=np.int64)
    v_pos = np.array([p for p, _ in vllm_ts], dtype=np.int64)
    r_pos = np.array([p for p, _ in ray_ts], dtype=np.int64)
    return v_pos, v_secs, r_pos, r_secs, np.array(ids, dtype=np.int64)


def _stamp_bytes(secs: np.ndarray) -> np.ndarray:
    """(n, 19) uint8 array of `YYYY-MM-DD HH:MM:SS` for epoch seconds, vectorised."""
    s = np.datetime_as_string(secs.astype("datetime64[s]"), unit="s").astype("S19")
    b = np.frombuffer(s.tobytes(), dtype=np.uint8).reshape(-1, 19).copy()
    b[:, 10] = ord(" ")
    return b


def build(target_bytes: int, out: Path) -> Path:
    """Write (once) a log of at least `target_bytes` made of re-timestamped copies of the real 0.8.3 log."""
    data = SOURCE.read_bytes()
    copies = -(-target_bytes // len(data))
    if out.exists() and out.stat().st_size == copies * len(data):
        return out
    v_pos, v_secs, r_pos, r_secs, id_pos = _template(data)
    span = int(max(v_secs.max(), r_secs.max()) - min(v_secs.min(), r_secs.min())) + 60
    tmpl = np.frombuffer(data, dtype=np.uint8)
    v_idx = v_pos[:, None] + np.arange(14)[None, :]  # MM-DD HH:MM:SS
    r_idx = r_pos[:, None] + np.arange(19)[None, :]  # YYYY-MM-DD HH:MM:SS
    i_idx = id_pos[:, None] + np.arange(6)[None, :]  # the first 6 hex digits of each request id
    tmp = out.with_suffix(".part")
    with open(tmp, "wb") as f:
        for k in range(copies):
            buf = tmpl.copy()
            vb = _stamp_bytes(v_secs + k * span)
            buf[v_idx] = np.concatenate([vb[:, 5:10], vb[:, 10:11], vb[:, 11:19]], axis=1)
            if len(r_pos):
                buf[r_idx] = _stamp_bytes(r_secs + k * span)
            buf[i_idx] = np.frombuffer(f"{k:06x}".encode(), dtype=np.uint8)[None, :]
            f.write(buf.tobytes())
    tmp.rename(out)
    return out


# -- the plain loop parser -----------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_PFX = re.compile(r"(?:[A-Za-z0-9][\w.-]*\s+\| )?(?:\((?:[^()]*? )?pid=\d+(?:, ip=[0-9a-fA-F.:]+)?\) ?)*")
_REC = re.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d) \[?([^\s\[\]]+?):(\d+)\] ")
_NUM = r"(?:\d+(?:\.\d+)?|nan|inf)"
_STATS = re.compile(rf"(?:Engine (\d+): )?Avg prompt throughput: ({_NUM}) tokens/s, Avg generation throughput: ({_NUM}) "
                    rf"tokens/s, Running: (\d+) reqs, (?:Swapped: (\d+) reqs, Pending|Waiting): (\d+) reqs"
                    rf"(?:, GPU KV cache usage: ({_NUM})%)?(?:, CPU KV cache usage: ({_NUM})%)?"
                    rf"(?:, Prefix cache hit rate: ({_NUM})%)?")
_PCH = re.compile(r"Prefix cache hit rate: GPU: ([\d.]+|nan)%, CPU: ([\d.]+|nan)%")
_RECV = re.compile(r"Received request ([^\s:]+): ")
_IDS = re.compile(r"prompt_token_ids: (\[[\d, ]*\]|None)")
_PARAMS = re.compile(r"params: ([A-Za-z]*Params\(.*?\)|None), (?:prompt_token_ids|lora_request): ")
_MAXT = re.compile(r"(?:\(|, )max_tokens=(\d+)")
_LIFE = re.compile(r"(Added|Finished|Aborted) request (\S+?)\.$")
_UVI = re.compile(r'(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(\S+:\d+) - "([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')


def loop_parse(path: str, year: int = YEAR) -> dict:
    """The straightforward parser: one regex match per line, Python objects per record, epoch seconds per record."""
    stats, pch, reqs, life, access = [], [], [], [], []
    day0: dict[tuple[str, str], int] = {}
    ts = None
    with open(path, encoding="utf-8", errors="replace", newline="\n") as f:
        for no, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if "\x1b" in line:
                line = _ANSI.sub("", line)
            body = line[_PFX.match(line).end():]
            m = _REC.match(body)
            if m:
                key = (m.group(2), m.group(3))
                d = day0.get(key)
                if d is None:
                    d = day0[key] = int(dt.datetime(year, int(key[0]), int(key[1]), tzinfo=dt.timezone.utc).timestamp())
                ts = d + int(m.group(4)) * 3600 + int(m.group(5)) * 60 + int(m.group(6))
                msg = body[m.end():]
                if msg.startswith(("Avg prompt", "Engine ")):
                    s = _STATS.match(msg)
                    if s:
                        stats.append((no, ts) + s.groups())
                elif msg.startswith("Prefix cache hit rate: GPU"):
                    s = _PCH.match(msg)
                    if s:
                        pch.append((no, ts) + s.groups())
                elif msg.startswith("Received request "):
                    r = _RECV.match(msg)
                    ids = _IDS.search(msg)
                    p = _PARAMS.search(msg)
                    mt = _MAXT.search(p.group(1)) if p else None
                    n = None
                    if ids and ids.group(1) not in ("None", "[]"):
                        n = ids.group(1).count(",") + 1
                    reqs.append((no, ts, r.group(1) if r else None, n, int(mt.group(1)) if mt else None,
                                 p.group(1) if p else None))
                else:
                    lm = _LIFE.match(msg)
                    if lm:
                        life.append((no, ts, lm.group(1), lm.group(2)))
            else:
                u = _UVI.match(body)
                if u:
                    access.append((no, ts) + u.groups())
    return {"stats": len(stats), "prefix_hits": len(pch), "received": len(reqs), "lifecycle": len(life), "access": len(access),
            "prompt_tokens_sum": sum(r[3] or 0 for r in reqs)}


# -- the contenders, each in a subprocess --------------------------------------------------------------------

def _worker(which: str, path: str, db: str) -> None:
    t0 = time.perf_counter()
    if which == "loop":
        counts = loop_parse(path)
    else:
        import stallscope
        from stallscope.parsers import Options

        with stallscope.open(db) as s:
            r = s.ingest([Path(path)], options=Options(year=YEAR))
            if not r.ok:
                raise SystemExit(f"ingest failed: {[x.message for x in r]}")
            q = lambda sql: s.con.execute(sql).fetchone()[0]  # noqa: E731
            # V0's prefix-cache line is folded into its stats row: one row per interval.
            counts = {"stats": q("SELECT count(*) FROM engine_stats"),
                      "prefix_hits": q("SELECT count(*) FROM engine_stats WHERE cpu_prefix_cache_hit_rate_pct IS NOT NULL"),
                      "received": q("SELECT count(*) FROM request_events WHERE event = 'received'"),
                      "lifecycle": q("SELECT count(*) FROM request_events WHERE event <> 'received'"),
                      "access": q("SELECT count(*) FROM log_events WHERE kind = 'access'"),
                      "prompt_tokens_sum": int(q("SELECT coalesce(sum(prompt_tokens), 0) FROM requests"))}
    print(json.dumps({"seconds": time.perf_counter() - t0, "counts": counts}))


def measure(which: str, path: Path, db: Path) -> dict:
    """Run one contender in a child process; wall time from the child, peak RSS of the child via RUSAGE_CHILDREN
    in a fresh intermediate process (so one contender's peak cannot mask the other's)."""
    code = ("import json, resource, subprocess, sys\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True, text=True)\n"
            "sys.stderr.write(r.stderr)\n"
            "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "print(json.dumps({'rc': r.returncode, 'out': r.stdout.strip().splitlines()[-1] if r.stdout.strip() else '',"
            " 'maxrss_kb': u.ru_maxrss, 'cpu_s': u.ru_utime + u.ru_stime}))\n")
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", code, sys.executable, __file__, "--worker", which, str(path), str(db)],
                         capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(res.stderr)
    outer = json.loads(res.stdout.strip().splitlines()[-1])
    if outer["rc"] != 0:
        raise SystemExit(f"{which} failed:\n{res.stderr}")
    inner = json.loads(outer["out"])
    return {"seconds": inner["seconds"], "wall_s": wall, "cpu_s": outer["cpu_s"], "peak_rss_mb": outer["maxrss_kb"] / 1024,
            "counts": inner["counts"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="size of the generated log in GB (default 1.0)")
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "stallscope-bench"))
    ap.add_argument("--keep-db", action="store_true")
    ap.add_argument("--worker", nargs=3, metavar=("WHICH", "PATH", "DB"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        _worker(*a.worker)
        return
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    log = build(int(a.gb * 1e9), d / f"vllm_0.8.3_{a.gb:g}GB.log")
    size = log.stat().st_size
    print(f"input: {log} ({size / 1e6:.0f} MB, built/cached in {time.perf_counter() - t0:.1f} s)")
    db = d / "bench.duckdb"
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    res = {"loop": measure("loop", log, db), "stallscope": measure("stallscope", log, db)}
    for name, r in res.items():
        print(f"{name:>10}: {r['seconds']:7.2f} s  {size / 1e6 / r['seconds']:7.1f} MB/s  peak RSS {r['peak_rss_mb']:7.0f} MB"
              f"  CPU {r['cpu_s']:6.2f} s (wall with start-up {r['wall_s']:.2f} s)  {r['counts']}")
    ratio = res["loop"]["seconds"] / res["stallscope"]["seconds"]
    print(f"ratio: stallscope is {ratio:.2f}x the loop parser (wall); "
          f"{res['loop']['cpu_s'] / res['stallscope']['cpu_s']:.2f}x in CPU time; load average {os.getloadavg()[0]:.2f}")
    same = {k: (res["loop"]["counts"][k], res["stallscope"]["counts"][k]) for k in res["loop"]["counts"]}
    print("same extraction:", all(a == b for a, b in same.values()), same)
    if not a.keep_db:
        for p in (db, Path(str(db) + ".wal")):
            p.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
