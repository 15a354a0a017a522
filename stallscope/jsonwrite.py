"""Write `json.dumps(doc, indent=1)` byte for byte, fast: a long list of like-shaped records is rendered by column.

Python's json module has no C encoder for indented output, so an hour's analysis (~430k spikes, ~500 MB of JSON)
spends ~18 CPU-s in the pure-Python one. Here a top-level list of dicts that all have the same keys (the spikes)
is rendered column by column: each column's scalars with the json module's own C string escaper and float repr,
nested lists of like-shaped dicts (a spike's culprits) the same way, and every record assembled from a %-template
of its keys. Anything not of that shape goes through the json module as before, so the bytes never differ.
"""
from __future__ import annotations

import json
import math
from operator import itemgetter
from json.encoder import encode_basestring_ascii as _esc

_INF = float("inf")
_SCALARS = (str, int, float, bool, type(None))


def _float(x: float) -> str:
    # json.encoder's floatstr with allow_nan=True
    if x != x:
        return "NaN"
    if x == _INF:
        return "Infinity"
    if x == -_INF:
        return "-Infinity"
    return float.__repr__(x)


def _scalar(x) -> str:
    if x is None:
        return "null"
    if x is True:
        return "true"
    if x is False:
        return "false"
    if type(x) is str:
        return _esc(x)
    if type(x) is int:
        return int.__repr__(x)
    return _float(x)


def _render_scalars(col: list) -> list[str]:
    """Each value as json.dumps renders it; the common single-type columns without a call per value."""
    kinds = set(map(type, col))
    if kinds <= {str, type(None)}:
        return [_esc(x) if x is not None else "null" for x in col]
    if kinds <= {int, type(None)}:
        return [int.__repr__(x) if x is not None else "null" for x in col]
    if kinds == {float} and all(map(math.isfinite, col)):
        return list(map(float.__repr__, col))
    if kinds <= {float, type(None)}:
        r = float.__repr__
        return [r(x) if x is not None and x - x == 0 else _scalar(x) for x in col]
    return [_scalar(x) for x in col]


def _render_records(recs: list, depth: int) -> list[str] | None:
    """The indent=1 text of each dict in `recs` (all with the same str keys, in the same order), its `{` at
    nesting depth `depth`; None when they are not all of that shape (the caller falls back to json)."""
    if not recs or type(recs[0]) is not dict or not recs[0]:
        return None
    keys = tuple(recs[0])
    if not all(type(k) is str for k in keys) or set(map(type, recs)) != {dict} \
            or not all(map(keys.__eq__, map(tuple, recs))):
        return None
    inner = "\n" + " " * (depth + 1)
    cols = []
    for k in keys:
        col = list(map(itemgetter(k), recs))
        kinds = set(map(type, col))
        if kinds <= set(_SCALARS):
            cols.append(_render_scalars(col))
        elif kinds == {list}:
            rendered = _render_lists(col, depth + 1)
            if rendered is None:
                return None
            cols.append(rendered)
        else:
            return None
    tmpl = "{" + ",".join(inner.replace("%", "%%") + _esc(k).replace("%", "%%") + ": %s" for k in keys) \
        + "\n" + " " * depth + "}"
    return [tmpl % row for row in zip(*cols)]


def _render_lists(col: list[list], depth: int) -> list[str] | None:
    """Each list (the value of a key at nesting depth `depth`) as indent=1 text: scalars or like-shaped dicts."""
    flat = [x for lst in col for x in lst]
    if not flat:
        return ["[]"] * len(col)
    if all(type(x) in _SCALARS for x in flat):
        items = _render_scalars(flat)
    else:
        items = _render_records(flat, depth + 1)
        if items is None:
            return None
    open_, sep, close = "[\n" + " " * (depth + 1), ",\n" + " " * (depth + 1), "\n" + " " * depth + "]"
    out, a = [], 0
    for lst in col:
        b = a + len(lst)
        out.append(open_ + sep.join(items[a:b]) + close if b > a else "[]")
        a = b
    return out


_MARK = "\0stallscope-fast-records\0"
BATCH = 20_000   # records rendered at a time: the text of one batch is held, never the whole list's


class NotUniform(Exception):
    """A batch of records turned out not to be of the shape rendered by column."""


def _fast_list(v: list):
    yield "[\n  "
    for i in range(0, len(v), BATCH):
        items = _render_records(v[i:i + BATCH], 2)
        if items is None:
            raise NotUniform
        yield (",\n  " if i else "") + ",\n  ".join(items)
    yield "\n ]"


def iter_json(doc: dict):
    """Chunks of json.dumps(doc, indent=1): a top-level value that is a long list of dicts is rendered by column
    (see the module doc), the rest by the json module. Raises NotUniform, possibly after some chunks, when such a
    list's records turn out not to share one shape (`write` then starts again with the json module)."""
    fast = [k for k, v in doc.items() if type(v) is list and len(v) > 1 and type(v[0]) is dict]
    if not fast:
        yield from json.JSONEncoder(indent=1).iterencode(doc)
        return
    marked = {k: (_MARK + k if k in fast else v) for k, v in doc.items()}
    tails = {_esc(_MARK + k): k for k in fast}
    for chunk in json.JSONEncoder(indent=1).iterencode(marked):
        # The pure-Python encoder yields a str value at the end of its own chunk (`, "key": "value"`).
        for enc, k in tails.items():
            if chunk.endswith(enc):
                yield chunk[:-len(enc)]
                yield from _fast_list(doc[k])
                break
        else:
            yield chunk


def write(doc: dict, f) -> None:
    """json.dumps(doc, indent=1) onto the text file `f` (opened for writing, seekable), in batches of chunks
    (never the whole text at once)."""
    try:
        _write_chunks(iter_json(doc), f)
    except NotUniform:
        f.seek(0)
        f.truncate()
        _write_chunks(json.JSONEncoder(indent=1).iterencode(doc), f)


def _write_chunks(chunks, f) -> None:
    # Small chunks (the json module's, a few bytes each) are joined into ~1 MB writes; a batch of records is
    # one big chunk, written as it comes.
    buf, size = [], 0
    for c in chunks:
        buf.append(c)
        size += len(c)
        if size >= 1 << 20:
            f.write("".join(buf))
            buf, size = [], 0
    f.write("".join(buf))


_ORJSON_MARK = "@@stallscope-batched-records-8c1e@@"


def orjson_bytes(doc: dict, key: str = "spikes"):
    """Chunks of orjson.dumps(doc, option=OPT_INDENT_2 | OPT_APPEND_NEWLINE), byte for byte, with doc[key] (a long
    list) dumped BATCH items at a time: an hour's spikes as one bytes object is ~600 MB on top of the dicts.
    A batch dumped alone is re-indented one level deeper: orjson escapes newlines inside strings, so every raw
    newline in its output is layout."""
    import orjson

    opt = orjson.OPT_INDENT_2
    v = doc.get(key)
    if type(v) is not list or len(v) <= BATCH:
        yield orjson.dumps(doc, option=opt | orjson.OPT_APPEND_NEWLINE)
        return
    head = orjson.dumps({**doc, key: _ORJSON_MARK}, option=opt | orjson.OPT_APPEND_NEWLINE)
    mark = orjson.dumps(_ORJSON_MARK)
    if head.count(mark) != 1:
        yield orjson.dumps(doc, option=opt | orjson.OPT_APPEND_NEWLINE)
        return
    before, after = head.split(mark)
    yield before + b"["
    for i in range(0, len(v), BATCH):
        text = orjson.dumps(v[i:i + BATCH], option=opt).replace(b"\n", b"\n  ")
        yield (b"," if i else b"") + text[1:-4]        # without its own "[" and "\n  ]"
    yield b"\n  ]" + after
