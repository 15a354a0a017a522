"""Fleet shards: which files of which replica over which window form one unit of analysis, and its content hash.

A SOURCE is either a directory or a manifest file (`.csv` / `.json`):

- Directory: one sub-directory per replica. The replica's pool is `pool=NAME/replica=NAME/` when the tree is laid
  out that way (Hive style), else the first line of an optional file named `pool` inside the replica directory,
  else `default`. A `replica=NAME` directory name gives NAME. Every non-hidden file under the replica directory
  (except that `pool` file) belongs to the replica; it is ingested as `stallscope analyze REPLICA_DIR` would, so
  files that are not inputs (a README, a truth.json) are skipped, not errors.
- Manifest: rows of `replica, pool, window, files`; `files` is a list (JSON) or `;`-separated (CSV) of files or
  directories, relative to the manifest's directory unless absolute or URIs. `pool` defaults to `default`, `window`
  to `all` (a manifest window is a label the user chose; `--window` does not cut it again). Rows with the same
  replica, pool and window are one shard.

Windows (`--window 10m`): the unit is the file. Each file of a replica falls in the window holding its last
instant (`sources.last_ns` after ingest: a rotated log or a benchmark result belongs to the window in which it was
closed; a server log also holds the start-up minutes before its traffic), and a window shard is the replica's
files of that window, analysed alone, so that a window's lake rows equal `stallscope analyze` of exactly those
files (clock alignment included). Records are never cut at a window edge: a request or a decode gap is analysed
whole, with the rest of its file. A file that is an input but carries no timestamp, and a file that looks like an
input but cannot be loaded, join the replica's earliest window (so that its shard says why). Finding the last
instants means parsing each file once more when planning; the result is cached in the lake (`_files`, keyed by
content hash), so a re-run parses only new files.

Paths may be local or URIs (`s3://bucket/fleet`, `gs://bucket/fleet`, `file:///...`) read through pyarrow's
filesystems; remote files are copied to a local temporary directory by the task that analyses them.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

from stallscope.errors import StallscopeError

ALL = "all"
_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class FileRef:
    path: str          # local absolute path or URI
    size: int
    sha256: str


@dataclass(frozen=True)
class Shard:
    pool: str
    replica: str
    window: str                    # `all` or the window start as YYYYMMDDTHHMMSSZ (or a manifest's label)
    inputs: tuple[str, ...]        # what the task ingests: directories (walked) and/or files (named)
    files: tuple[FileRef, ...]     # every file those inputs hold, for the content hash and `_shards.files`
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    content_hash: str = ""

    @property
    def shard_id(self) -> str:
        return shard_id(self.pool, self.replica, self.window)



def shard_id(pool: str, replica: str, window: str) -> str:
    """`pool~replica~window`: readable, URL-safe, unique (names may hold `.`, `-`, `_` but never `~`)."""
    return f"{pool}~{replica}~{window}"


def check_name(kind: str, value: str) -> str:
    value = value.strip()
    if not _SAFE.match(value):
        raise StallscopeError(f"{kind} name {value!r} is not usable as a lake partition: use letters, digits, "
                              "'.', '-' and '_' (starting with a letter or digit)")
    return value


def parse_duration(text: str) -> int:
    """`10m`, `1h`, `30s`, `1d` (or `1.5h`) into nanoseconds."""
    m = _DUR.match(text or "")
    if not m or float(m[1]) <= 0:
        raise StallscopeError(f"bad --window {text!r}: use a duration such as 10m, 1h, 30s or 1d")
    return int(round(float(m[1]) * _UNIT_S[m[2]] * 1e9))


def window_label(start_ns: int) -> str:
    return datetime.fromtimestamp(start_ns // 1_000_000_000, tz=timezone.utc).strftime("%Y%m%dT%H%M%SZ")


# -- filesystems ------------------------------------------------------------------------------------------------
def is_uri(path: str) -> bool:
    return "://" in str(path)


def filesystem(path: str):
    """(pyarrow FileSystem, path inside it) for a local path or a URI: pyarrow's own (s3://, gs://, hdfs://,
    file://), else any fsspec filesystem when fsspec is installed (az://, abfs://, memory://, ...)."""
    from pyarrow import fs as pafs

    if not is_uri(path):
        return pafs.LocalFileSystem(), str(Path(path).resolve())
    try:
        return pafs.FileSystem.from_uri(str(path))
    except Exception as e:  # noqa: BLE001 - an unknown scheme or missing credentials: one line for the user
        first = e
    try:
        import fsspec
        from fsspec.core import url_to_fs
    except ImportError:
        raise StallscopeError(f"cannot open {path}: {str(first).splitlines()[0]}") from None
    try:
        ffs, inner = url_to_fs(str(path))
    except Exception as e:  # noqa: BLE001
        raise StallscopeError(f"cannot open {path}: {str(e).splitlines()[0]}") from None
    del fsspec
    return pafs.PyFileSystem(pafs.FSSpecHandler(ffs)), inner


def _join(root: str, rel: str, uri_root: str | None) -> str:
    """A file's address as the user would write it: a local path, or the URI under the source URI."""
    if uri_root is None:
        return rel if rel.startswith("/") else str(PurePosixPath(root) / rel)
    return uri_root.rstrip("/") + "/" + rel


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in PurePosixPath(rel).parts)


def _list_files(fs, base: str) -> list[tuple[str, int, int | None]]:
    """(path relative to base, size, mtime ns) of every non-hidden regular file under base, sorted."""
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    out = []
    for i in infos:
        if i.type != pafs.FileType.File:
            continue
        rel = i.path[len(base.rstrip("/")) + 1:]
        if not _hidden(rel):
            out.append((rel, int(i.size or 0), i.mtime_ns))
    return sorted(out)


class Hasher:
    """SHA-256 of files, reusing the lake's record (`_hashes`) of files whose address, size and modification time
    are unchanged, so that a re-run does not read (or, from an object store, download) every file again."""

    def __init__(self, known: dict | None = None):
        self.known = dict(known or {})
        self.seen: dict[tuple, str] = {}

    def __call__(self, fs, path: str, addr: str, size: int, mtime_ns: int | None) -> str:
        key = (addr, int(size), mtime_ns)
        digest = self.known.get(key) if mtime_ns is not None else None
        if digest is None:
            digest = sha256_of(fs, path)
        self.seen[key] = digest
        return digest


def sha256_of(fs, path: str) -> str:
    h = hashlib.sha256()
    with fs.open_input_stream(path, compression=None) as f:
        while True:
            block = f.read(1 << 20)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


# -- planning ---------------------------------------------------------------------------------------------------
@dataclass
class Replica:
    pool: str
    replica: str
    window: str | None        # set by a manifest row; None = cut by --window (or `all`)
    inputs: list[str]         # directories and/or files, as addresses (local paths or URIs)
    files: list[FileRef]


def discover(source: str, hasher: Hasher | None = None) -> list[Replica]:
    """The replicas of a SOURCE directory or manifest (see the module doc), with every file hashed."""
    hasher = hasher or Hasher()
    fs, base = filesystem(source)
    from pyarrow import fs as pafs

    info = fs.get_file_info(base)
    if info.type == pafs.FileType.NotFound:
        raise StallscopeError(f"{source}: no such file or directory")
    if info.type == pafs.FileType.File:
        return _manifest(source, fs, base, hasher)
    uri_root = str(source).rstrip("/") if is_uri(source) else None
    replicas: list[Replica] = []
    children = [i for i in fs.get_file_info(pafs.FileSelector(base, recursive=False))
                if i.type == pafs.FileType.Directory and not i.base_name.startswith((".", "_"))]
    for child in sorted(children, key=lambda i: i.base_name):
        name = child.base_name
        if name.startswith("pool="):
            pool = check_name("pool", name[5:])
            for sub in sorted((i for i in fs.get_file_info(pafs.FileSelector(child.path, recursive=False))
                               if i.type == pafs.FileType.Directory and not i.base_name.startswith((".", "_"))),
                              key=lambda i: i.base_name):
                rep = check_name("replica", sub.base_name.removeprefix("replica="))
                replicas.append(_replica_dir(fs, sub.path, pool, rep, f"{name}/{sub.base_name}", uri_root, hasher))
        else:
            rep = check_name("replica", name.removeprefix("replica="))
            replicas.append(_replica_dir(fs, child.path, None, rep, name, uri_root, hasher))
    if not replicas:
        raise StallscopeError(f"{source}: no replica directories in it (one sub-directory per replica, or "
                              "pool=NAME/replica=NAME/, or a manifest .csv/.json)")
    seen: dict[tuple[str, str], int] = {}
    for r in replicas:
        key = (r.pool, r.replica)
        if key in seen:
            raise StallscopeError(f"replica {r.replica!r} of pool {r.pool!r} appears twice in {source}")
        seen[key] = 1
    return replicas


def _replica_dir(fs, path: str, pool: str | None, replica: str, rel: str, uri_root: str | None,
                 hasher: Hasher) -> Replica:
    files = _list_files(fs, path)
    if pool is None:
        pool = "default"
        if any(f == "pool" for f, _, _ in files):
            with fs.open_input_stream(path.rstrip("/") + "/pool", compression=None) as f:
                text = f.read().decode("utf-8", "replace").strip().splitlines()
            pool = check_name("pool", text[0] if text else "default")
    files = [x for x in files if x[0] != "pool"]
    addr = path if uri_root is None else f"{uri_root}/{rel}"
    refs = []
    for f, size, mtime in files:
        a = _join(path, f, None if uri_root is None else addr)
        refs.append(FileRef(a, size, hasher(fs, f"{path}/{f}", a, size, mtime)))
    return Replica(pool, replica, None, [addr], refs)


def _manifest(source: str, fs, base: str, hasher: Hasher) -> list[Replica]:
    with fs.open_input_stream(base, compression=None) as f:
        raw = f.read().decode("utf-8", "replace")
    rows: list[dict] = []
    if base.lower().endswith(".json"):
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as e:
            raise StallscopeError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})") from None
        doc = doc.get("shards", doc.get("replicas")) if isinstance(doc, dict) else doc
        if not isinstance(doc, list):
            raise StallscopeError(f"{source}: a JSON manifest is a list of {{replica, pool, window, files}} objects")
        rows = doc
    elif base.lower().endswith(".csv"):
        rows = list(csv.DictReader(io.StringIO(raw)))
        for r in rows:
            r["files"] = [p.strip() for p in (r.get("files") or "").split(";") if p.strip()]
    else:
        raise StallscopeError(f"{source}: a manifest must be a .csv or .json file (or give a directory)")
    parent = str(PurePosixPath(base).parent)
    uri_parent = str(source).rsplit("/", 1)[0] if is_uri(source) else None
    merged: dict[tuple, Replica] = {}
    from pyarrow import fs as pafs

    for n, r in enumerate(rows, start=1):
        if not isinstance(r, dict) or not r.get("replica"):
            raise StallscopeError(f"{source}: row {n} has no replica")
        files = r.get("files") or []
        if isinstance(files, str):
            files = [p.strip() for p in files.split(";") if p.strip()]
        if not files:
            raise StallscopeError(f"{source}: row {n} ({r['replica']}) lists no files")
        pool = check_name("pool", str(r.get("pool") or "default"))
        rep = check_name("replica", str(r["replica"]))
        window = check_name("window", str(r["window"])) if r.get("window") else None
        key = (pool, rep, window)
        rec = merged.setdefault(key, Replica(pool, rep, window, [], []))
        for p in files:
            p = str(p)
            addr = p if is_uri(p) or p.startswith("/") else (
                f"{uri_parent}/{p}" if uri_parent else str(Path(parent) / p))
            ffs, fpath = filesystem(addr)
            inf = ffs.get_file_info(fpath)
            if inf.type == pafs.FileType.NotFound:
                raise StallscopeError(f"{source}: row {n} ({rep}): {p}: no such file or directory")
            if inf.type == pafs.FileType.Directory:
                for rel, size, mtime in _list_files(ffs, fpath):
                    a = addr.rstrip("/") + "/" + rel
                    rec.files.append(FileRef(a, size, hasher(ffs, f"{fpath}/{rel}", a, size, mtime)))
            else:
                size = int(inf.size or 0)
                rec.files.append(FileRef(addr, size, hasher(ffs, fpath, addr, size, inf.mtime_ns)))
            rec.inputs.append(addr)
    return list(merged.values())


def content_hash(files, options: dict) -> str:
    """Hash of the shard's file contents (with their names) and every option that changes its analysis (the
    window length does not: a shard's analysis depends only on its files)."""
    h = hashlib.sha256()
    for name, digest in sorted((PurePosixPath(f.path).name, f.sha256) for f in files):
        h.update(f"{name}\0{digest}\n".encode())
    h.update(json.dumps(options, sort_keys=True, default=str).encode())
    return h.hexdigest()[:32]


def plan(replicas: list[Replica], options: dict, window_ns: int | None = None,
         last_ns: dict[str, int | None] | None = None) -> list[Shard]:
    """Shards from replicas; with `window_ns`, `last_ns` maps the sha256 of each file that is an input to its last
    instant (None: no timestamp, or it could not be loaded)."""
    shards: list[Shard] = []
    for r in replicas:
        if r.window is not None or window_ns is None:
            window = r.window or ALL
            shards.append(Shard(r.pool, r.replica, window, tuple(r.inputs), tuple(r.files),
                                content_hash=content_hash(r.files, options)))
            continue
        # Files that are inputs map to their last instant; the others (a README, a truth.json) belong to no window.
        last_ns = last_ns or {}
        inputs = [f for f in r.files if f.sha256 in last_ns]
        known = [last_ns[f.sha256] for f in inputs if last_ns[f.sha256] is not None]
        if not known:  # nothing in it carries a time: one shard, not cut
            shards.append(Shard(r.pool, r.replica, ALL, tuple(r.inputs), tuple(r.files),
                                content_hash=content_hash(r.files, options)))
            continue
        earliest = min(known) // window_ns * window_ns
        by_window: dict[int, list[FileRef]] = {}
        for f in inputs:
            v = last_ns[f.sha256]
            by_window.setdefault(earliest if v is None else v // window_ns * window_ns, []).append(f)
        for start, files in sorted(by_window.items()):
            shards.append(Shard(r.pool, r.replica, window_label(start), tuple(f.path for f in files),
                                tuple(files), start, start + window_ns,
                                content_hash=content_hash(files, options)))
    ids = [s.shard_id for s in shards]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise StallscopeError(f"shard {dup} twice: two windows of one replica got the same label")
    return shards
