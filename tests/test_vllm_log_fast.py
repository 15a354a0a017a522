"""The vLLM log parser's fast paths give what its general paths give: the whole store with every parser's fast lanes
on and off (`base.fast_lanes`), prompt blocks read from the token-id text (`_id_blocks`) against the ids split and
cast one by one (`_split_blocks`), and lists printed any other way are left to the general path."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from stallscope.parsers import vllm_log as V
from stallscope.parsers.base import fast_lanes
from conftest import REAL
from helpers import same_tables, store_tables

TABLES = ("requests", "request_events", "engine_stats", "engine_config", "log_events", "rejects")
WRAPS = [b"(RayWorkerWrapper pid=1273) ", b"vllm-leader-1  | "]  # bench/logvariants.CUT_PREFIXES["vllm"]


def _said_canon(tables: dict) -> dict:
    """The noise note lists kinds by count; kinds with equal counts may come in either order."""
    head = "skipped as noise: "
    canon = [(st, msg, sorted(head + ", ".join(sorted(n[len(head):].split(", "))) if n.startswith(head) else n
                              for n in notes)) for st, msg, notes in tables["said"]]
    return {**tables, "said": canon}


def test_fast_lanes_give_the_store_of_the_general_path_on_every_real_log(tmp_path, monkeypatch):
    """Every real vLLM log (and the Ray startup log behind a Ray worker and a compose prefix), all the tables, the
    sources' accounting and what ingest said: the same with the fast lanes on and off."""
    paths = sorted((REAL / "vllm").glob("*.log")) + sorted((REAL / "vllm" / "excerpts").glob("*.log"))
    assert len(paths) >= 20
    ray = (REAL / "vllm" / "v0_0.8.3_ray_deepseekv25_tp8pp2_startup_and_2req_llmk8s.log").read_bytes()
    for i, w in enumerate(WRAPS):
        paths.append(tmp_path / f"wrapped{i}.log")
        paths[-1].write_bytes(b"".join(w + ln for ln in ray.splitlines(keepends=True)))
    took = {"head": 0, "ids": 0}
    heads, blocks = V._fast_heads, V._id_blocks

    def counting_heads(df):
        got = heads(df)
        took["head"] += got.len() - got.null_count()
        return got

    def counting_blocks(ids):
        got = blocks(ids)
        took["ids"] += 0 if got is None else len(got[0])
        return got
    monkeypatch.setattr(V, "_fast_heads", counting_heads)
    monkeypatch.setattr(V, "_id_blocks", counting_blocks)
    with fast_lanes(True):
        fast = store_tables(paths, TABLES, said=True)
    assert took["head"] > 3000 and took["ids"] >= 800, took
    taken = dict(took)
    with fast_lanes(False):
        general = store_tables(paths, TABLES, said=True)
    assert took == taken  # switched off, neither lane read a line
    assert fast["requests"].height > 800 and fast["engine_stats"].height > 100
    same_tables(_said_canon(fast), _said_canon(general))


def _split_blocks(ids: list[str]) -> tuple[list[int], list[tuple[int, ...]]]:
    """ids per list and every whole 16-token block as numbers, the way the general path reads them."""
    t = pl.Series(ids).str.strip_chars("[]").str.split(", ")
    n = t.list.len().to_list()
    vals = t.explode().cast(pl.Int64, strict=False).fill_null(-1).to_list()
    blocks, at = [], 0
    for k in n:
        blocks += [tuple(vals[at + V.BLOCK * j: at + V.BLOCK * (j + 1)]) for j in range(k // V.BLOCK)]
        at += k
    return n, blocks


def _same_partition(a: list, b: np.ndarray) -> bool:
    """Equal blocks have equal hashes and equal hashes come from equal blocks."""
    fwd, back = {}, {}
    return all(fwd.setdefault(x, y) == y and back.setdefault(y, x) == x for x, y in zip(a, b.tolist()))


def _lists(seed: int, n: int = 400) -> list[str]:
    rng = np.random.default_rng(seed)
    shared = rng.integers(0, 128_256, 600)
    out = []
    for _ in range(n):
        head = shared[: rng.integers(0, 600)]
        tail = rng.integers(0, 10 ** int(rng.integers(1, 7)), int(rng.integers(1, 200)))
        out.append("[" + ", ".join(map(str, [*head, *tail])) + "]")
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_blocks_from_text_equal_blocks_from_numbers(seed):
    ids = _lists(seed)
    got = V._id_blocks(pl.Series(ids))
    assert got is not None
    n_tok, h, nb = got
    n, blocks = _split_blocks(ids)
    assert n_tok.tolist() == n and nb.tolist() == [k // V.BLOCK for k in n]
    assert len(h) == len(blocks) and _same_partition(blocks, h)
    # a slice of a larger column (an Arrow offset) reads the same
    part = V._id_blocks(pl.Series(ids).slice(37, 200))
    assert part is not None and _same_partition(_split_blocks(ids[37:237])[1], part[1])


@pytest.mark.parametrize("odd", ["[1,2]", "[1,  2]", "[1 , 2]", "[, 2]", "[1, ]", "[]", "[1, -2]", "[+1, 2]",
                                 "[007, 1]", "[1, 0012]", "[1234567890123456789, 1]", "[1, 2] ", "[[1, 2]", "[1, 2"])
def test_lists_printed_otherwise_go_the_general_way(odd):
    assert V._id_blocks(pl.Series(["[1, 2, 3]", odd])) is None


def test_zero_ids_and_one_id_lists_are_read():
    ids = ["[" + ", ".join(["0"] * 40) + "]", "[5]", "[0]", "[" + ", ".join(map(str, range(32))) + "]"]
    got = V._id_blocks(pl.Series(ids))
    assert got is not None
    n, blocks = _split_blocks(ids)
    assert got[0].tolist() == n == [40, 1, 1, 32] and _same_partition(blocks, got[1])


def test_shared_prefix_tokens_the_same_either_way(tmp_path):
    """A log whose prompts share prefixes lands the same shared_prefix_tokens whether its ids are read from the
    text or split one by one."""
    from stallscope.ingest.orchestrate import ingest_paths
    from stallscope.parsers import Options
    from stallscope import Store

    lines = []
    for i, ids in enumerate(_lists(3, 120)):
        rid = f"cmpl-{i:032x}"
        lines.append(f"INFO 04-14 16:{i // 60:02d}:{i % 60:02d} [logger.py:39] Received request {rid}: prompt: 'x', "
                     f"params: SamplingParams(n=1, max_tokens=16), prompt_token_ids: {ids}, lora_request: None, "
                     "prompt_adapter_request: None.")
    path = tmp_path / "prompts.log"
    path.write_text("\n".join(lines) + "\n")

    def shared(db):
        with Store(str(tmp_path / db)) as st:
            ingest_paths(st, [path], options=Options(year=2025))
            return st.con.execute("SELECT request_id, prompt_tokens, shared_prefix_tokens FROM requests "
                                  "ORDER BY request_id").fetchall()

    fast = shared("fast.duckdb")
    with fast_lanes(False):
        slow = shared("slow.duckdb")
    assert fast == slow
    assert sum(r[2] > 0 for r in fast) > 50  # the prompts do share prefixes


def test_the_same_blocks_in_another_order_share_no_prefix(tmp_path):
    """Blocks A, B then B, A: the second prompt shares no prefix with the first (a prefix is blocks in order); A, B,
    C then shares exactly the 32 tokens of A, B."""
    from stallscope.ingest.orchestrate import ingest_paths
    from stallscope.parsers import Options
    from stallscope import Store

    a, b, c = ([k * 1000 + i for i in range(V.BLOCK)] for k in (1, 2, 3))
    prompts = [a + b, b + a, a + b + c]
    lines = [f"INFO 04-14 16:00:{i:02d} [logger.py:39] Received request cmpl-{i:032x}: prompt: 'x', params: "
             f"SamplingParams(n=1, max_tokens=16), prompt_token_ids: [{', '.join(map(str, p))}], lora_request: None, "
             "prompt_adapter_request: None." for i, p in enumerate(prompts)]
    path = tmp_path / "order.log"
    path.write_text("\n".join(lines) + "\n")
    with Store(str(tmp_path / "o.duckdb")) as st:
        ingest_paths(st, [path], options=Options(year=2025))
        got = st.con.execute("SELECT shared_prefix_tokens FROM requests ORDER BY request_id").fetchall()
    assert [r[0] for r in got] == [0, 0, 2 * V.BLOCK]


def test_hard_wrapped_received_line_is_read_again_after_joining(tmp_path):
    """A Received line hard-wrapped by a terminal copy is read from its joined message, not from the first piece
    the worker threads saw: the same request row as the unwrapped line."""
    from stallscope.ingest.orchestrate import ingest_paths
    from stallscope.parsers import Options
    from stallscope import Store

    ids = "[" + ", ".join(str(1000 + i) for i in range(40)) + "]"
    line = ("INFO 04-14 16:14:55 [logger.py:39] Received request cmpl-0123456789abcdef0123456789abcdef: prompt: "
            "'hello', params: SamplingParams(n=1, temperature=0.6, max_tokens=77), prompt_token_ids: "
            f"{ids}, lora_request: None, prompt_adapter_request: None.")
    after = "INFO 04-14 16:14:56 [engine.py:310] Added request cmpl-0123456789abcdef0123456789abcdef."
    wrapped = "\n".join(line[i:i + 80] for i in range(0, len(line), 80))

    def request(name, text):
        path = tmp_path / f"{name}.log"
        path.write_text(text + "\n" + after + "\n")
        with Store(str(tmp_path / f"{name}.duckdb")) as st:
            ingest_paths(st, [path], options=Options(year=2025))
            return st.con.execute("SELECT request_id, prompt_tokens, max_tokens, params, arrival_ns FROM requests"
                                  ).fetchall()

    whole = request("whole", line)
    assert whole[0][1:3] == (40, 77)
    assert request("wrapped", wrapped) == whole
