"""Whether two checkouts' TGI log ingest lands the same store: every table, row for row, on the real TGI logs and a
bench-style log with wrapper prefixes (the check behind every speed change of the TGI parser).

Each side ingests the same files into its own DuckDB file, in its own process, with its own Python (a checkout's
`.venv`): this checkout against a reference (default /work/main). Then every table the reference store holds is
compared with DuckDB, `EXCEPT ALL` both ways, with `source_id` replaced by the source's file name (row order is not
compared: no canonical table has one); `sources` is compared on its accounting columns (records parsed, skipped,
rejected, raw bytes, clock, first/last instant) and the ingest notes of each file one by one.

    .venv/bin/python bench/tgi_equiv.py [--ref /work/main] [--dir /tmp/bench-t/equiv] [--mb 4] [--frame-bytes N]
                                        [extra files...]

Exit status 0 when every table is identical, 1 otherwise (the differing rows are printed, a few per table).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL = Path(os.environ.get("STALLSCOPE_REAL", ROOT.parent / "shared" / "real"))

SOURCE_COLS = ("format", "parser", "records_parsed", "records_skipped", "records_rejected", "raw_bytes",
               "clock_offset_ns", "clock_method", "clock_residual_ns", "clock_note", "first_ns", "last_ns")

# Lines built to look like the Success layout but not be it (or to hold timing-like text before it).
TRICKY = [
    # a stop string holding timing fields before the real ones
    '2024-02-14T06:49:52.000001Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(14), stop: ["queue_time=\\"5ms\\"", "seed=\\"Some(7)\\""], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # a stop string holding `} total_time=` itself
    '2024-02-14T06:49:52.000011Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(9), stop: ["} total_time=\\"1ms\\" x"], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # a stop string that reads as another handler span (P_REQSPAN's last match names the endpoint)
    '2024-02-14T06:49:52.000016Z  INFO generate{parameters=GenerateParameters { best_of: None, max_new_tokens: '
    'Some(9), stop: ["x:evil{total_time=1", "y:bad{parameters=2"], seed: None } total_time="611.286748ms" '
    'validation_time="754.5µs" queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" '
    'seed="None"}: text_generation_router::server: router/src/server.rs:299: Success',
    # an outer span holding timing fields before the Success layout
    '2024-02-14T06:49:52.000007Z  INFO outer{queue_time="5ms" seed="Some(7)"}:generate{parameters=GenerateParameters '
    '{ best_of: None, max_new_tokens: Some(14), seed: None } total_time="611.286748ms" validation_time="754.5µs" '
    'queue_time="127.337µs" inference_time="610.405028ms" time_per_token="43.600359ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:299: Success',
    # no word boundary before total_time
    '2024-02-14T06:49:52.000002Z  INFO chat_completions{xtotal_time="735.200735ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # every unit, a whole-second value, a seed beyond u64
    '2024-02-14T06:49:52.000003Z  INFO chat_completions{total_time="4s" validation_time="12ns" queue_time="9us" '
    'inference_time="3.9μs" time_per_token="1.5s" seed="Some(99999999999999999999999)"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # a field after seed
    '2024-02-14T06:49:52.000004Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None" x="1"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # a non-ASCII digit in a value
    '2024-02-14T06:49:52.000005Z  INFO chat_completions{total_time="٣ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # fields out of order, a missing field, an empty value, a unit TGI never prints
    '2024-02-14T06:49:52.000008Z  INFO chat_completions{validation_time="955.594µs" total_time="735.2ms" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '2024-02-14T06:49:52.000009Z  INFO chat_completions{total_time="735.2ms" validation_time="" '
    'queue_time="73.176µs" inference_time="734.172108ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '2024-02-14T06:49:52.000010Z  INFO chat_completions{total_time="735.2min" validation_time="1.5.5ms" '
    'queue_time="-73µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="Some(-1)"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    # Success with a message after it, a Success of another target, a Success at another level, a radix look-alike
    '2024-02-14T06:49:52.000012Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success!',
    '2024-02-14T06:49:52.000013Z  WARN chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router_v3::server: Success',
    '2024-02-14T06:49:52.000014Z ERROR text_generation_router::server: router/src/server.rs:622: Success',
    '2025-05-26T10:46:35.221389Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 580 '
    '- Suffix 1023 more',
    '2025-05-26T10:46:35.221390Z  INFO text_generation_router_v3::radix: Prefix 99999999999999999999 - Suffix 1',
    '2025-13-26T10:46:35.221390Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 5 - '
    'Suffix 1',
    # a time in non-ASCII digits (TS_RX's \d matches them; the time does not parse)
    '٢٠٢٤-02-14T06:49:52.000015Z  INFO chat_completions{total_time="735.2ms" validation_time="955.594µs" '
    'queue_time="73.176µs" inference_time="734.172108ms" time_per_token="36.708605ms" seed="None"}: '
    'text_generation_router::server: router/src/server.rs:622: Success',
    '٢٠٢٥-05-26T10:46:35.221391Z  INFO text_generation_router_v3::radix: backends/v3/src/radix.rs:108: Prefix 7 - '
    'Suffix 8',
    # a continuation line right after a Success and after a radix line (each starts a record of its own)
    '    at a continuation line after a one-line record',
    '{"timestamp":"2024-02-14T06:49:52.000006Z","level":"INFO","message":"Success","target":'
    '"text_generation_router::server","span":{"total_time":"4.065504959s","validation_time":"1ms","queue_time":"2ms",'
    '"inference_time":"4s","time_per_token":"40ms","seed":"None","name":"generate"},"spans":[{"name":"generate"}]}',
]
PREFIXES = [b"tgi-1  | ", b"(Router pid=7) ", b"[pod/tgi-0/router] ", b"Dec  1 12:00:00 node7 tgi[1201]: ",
            b"(A pid=1) (RayWorkerWrapper pid=2, ip=10.0.0.1) ", b"[text-generation-inference] | "]


def bench_style(path: Path, mb: float) -> Path:
    """The real text logs and their Success/radix lines many times (as bench_logs builds its TGI file), each line
    also behind ANSI colour, each wrapper prefix, a dedup marker and CRLF, plus the TRICKY lines."""
    mix = b"".join(p.read_bytes().rstrip(b"\n") + b"\n" for p in sorted((REAL / "tgi").glob("*_text_*.log")))
    all_lines = mix.split(b"\n")[:-1]
    body = [ln for ln in all_lines if re.search(rb": Success$|: Prefix \d+ - Suffix \d+$", ln)]
    tricky = [t.encode() for t in TRICKY]
    variants = []
    for i, ln in enumerate(body + tricky):
        variants.append(ln)
        variants.append(b"\x1b[32m" + ln[:28] + b"\x1b[0m" + ln[28:])  # ANSI colour inside the head
        variants.append(PREFIXES[i % len(PREFIXES)] + ln)
        variants.append(ln + b" [repeated 3x across cluster]")
        variants.append(ln + b"\r")
    wrapped = [PREFIXES[i % len(PREFIXES)] + ln for i, ln in enumerate(all_lines)]  # the whole mix behind prefixes
    block = mix + b"\n".join(variants * 10) + b"\n" + b"\n".join(wrapped) + b"\n" + b"\n".join(tricky) + b"\n"
    with open(path, "wb") as f:
        for _ in range(max(1, int(mb * 1e6 / len(block)))):
            f.write(block)
    return path


def _worker(db: str, files: list[str]) -> None:
    import stallscope
    if os.environ.get("TGI_EQUIV_FRAME_BYTES"):  # small frames: many frame edges inside records
        import stallscope.parsers.logrecords as lr
        lr.FRAME_BYTES = int(os.environ["TGI_EQUIV_FRAME_BYTES"])
    with stallscope.open(db) as s:
        report = s.ingest([Path(f) for f in files])
        notes = {Path(r.path).name: list(r.notes) for r in report}
        bad = [r.message for r in report if not r.ok]
    print(json.dumps({"notes": notes, "failed": bad, "code": stallscope.__file__}))


def run_side(python: str, db: Path, files: list[Path]) -> dict:
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    t0 = time.perf_counter()
    r = subprocess.run([python, __file__, "--worker", str(db), *map(str, files)], capture_output=True, text=True,
                       cwd="/")
    if r.returncode:
        raise SystemExit(f"{python} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    out["seconds"] = time.perf_counter() - t0
    return out


def compare(a: Path, b: Path) -> list[str]:
    import duckdb
    con = duckdb.connect()
    con.execute(f"ATTACH '{a}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b}' AS b (READ_ONLY)")
    problems = []
    tables = [r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'a' ORDER BY table_name").fetchall()]
    for t in tables:
        cols = [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'a' AND table_name = ? "
            "ORDER BY column_index", [t]).fetchall()]
        cols_b = [r[0] for r in con.execute(
            "SELECT column_name FROM duckdb_columns() WHERE database_name = 'b' AND table_name = ? "
            "ORDER BY column_index", [t]).fetchall()]
        if cols != cols_b:
            problems.append(f"{t}: columns differ: {cols} vs {cols_b}")
            continue
        if t == "sources":
            sel = "path_name, " + ", ".join(SOURCE_COLS)
            q = {d: f"SELECT regexp_extract(path, '[^/]*$') AS path_name, * EXCLUDE (path) FROM {d}.sources"
                 for d in "ab"}
        elif "source_id" in cols:
            sel = "*"
            q = {d: f"SELECT regexp_extract(s.path, '[^/]*$') AS src, x.* EXCLUDE (source_id) FROM {d}.{t} x "
                    f"LEFT JOIN {d}.sources s USING (source_id)" for d in "ab"}
        else:
            sel = "*"
            q = {d: f"SELECT * FROM {d}.{t}" for d in "ab"}
        n = {d: con.execute(f"SELECT count(*) FROM ({q[d]})").fetchone()[0] for d in "ab"}
        for x, y in (("a", "b"), ("b", "a")):
            diff = con.execute(f"SELECT {sel} FROM ({q[x]}) EXCEPT ALL SELECT {sel} FROM ({q[y]})").fetchall()
            if diff:
                problems.append(f"{t}: {len(diff)} row(s) only in {'reference' if x == 'a' else 'this checkout'} "
                                f"(rows {n['a']} vs {n['b']}); first: {[str(r)[:600] for r in diff[:3]]}")
        print(f"  {t:<16} {n['a']:>9} rows  {'same' if not any(p.startswith(t + ':') for p in problems) else 'DIFFERENT'}")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="/work/main", help="the reference checkout (its .venv/bin/python is used)")
    ap.add_argument("--dir", default="/tmp/bench-t/equiv")
    ap.add_argument("--mb", type=float, default=4.0, help="size of the bench-style log (default 4 MB)")
    ap.add_argument("--frame-bytes", type=int, default=0,
                    help="frame size for both sides (default: the parser's own); e.g. 40000 for many frame edges")
    ap.add_argument("--no-real", action="store_true", help="only the extra files (and the bench-style log)")
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    ap.add_argument("files", nargs="*", type=Path)
    a = ap.parse_args()
    if a.worker:
        _worker(a.worker[0], a.worker[1:])
        return
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    files = [] if a.no_real else sorted((REAL / "tgi").glob("*.log"))
    if a.mb > 0:
        files.append(bench_style(d / "tgi_bench_style.log", a.mb))
    files += [f.resolve() for f in a.files]
    if a.frame_bytes:
        os.environ["TGI_EQUIV_FRAME_BYTES"] = str(a.frame_bytes)
    ref_py = str(Path(a.ref) / ".venv" / "bin" / "python")
    this_py = str(ROOT / ".venv" / "bin" / "python")
    ra = run_side(ref_py, d / "ref.duckdb", files)
    rb = run_side(this_py, d / "this.duckdb", files)
    print(f"reference {ra['code']} ({ra['seconds']:.1f} s) vs this checkout {rb['code']} ({rb['seconds']:.1f} s), "
          f"{len(files)} files")
    problems = compare(d / "ref.duckdb", d / "this.duckdb")
    if ra["failed"] != rb["failed"]:
        problems.append(f"failed files differ: {ra['failed']} vs {rb['failed']}")
    for name in sorted(set(ra["notes"]) | set(rb["notes"])):
        if ra["notes"].get(name) != rb["notes"].get(name):
            problems.append(f"notes of {name} differ: {ra['notes'].get(name)} vs {rb['notes'].get(name)}")
    print("notes           ", "same" if not any(p.startswith("notes") for p in problems) else "DIFFERENT")
    for p in problems:
        print("DIFF", p)
    print("IDENTICAL" if not problems else f"{len(problems)} difference(s)")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
