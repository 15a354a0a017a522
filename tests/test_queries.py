"""The analyses in queries/*.sql: one documented view or macro per file, every output column documented."""
from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pytest

import stallscope
from stallscope import sqlviews

QUERIES = sqlviews.all_queries()
FLEET_QUERIES = sqlviews.all_queries(fleet=True)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def empty_store():
    s = stallscope.open(":memory:")
    sqlviews.install(s.con)
    sqlviews.install_export(s.con)
    return s


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_documented_columns_are_the_output_columns(empty_store, name):
    q = QUERIES[name]
    assert q.doc, f"{name}.sql has no description"
    if q.kind == "scalar":
        pytest.skip("a scalar macro has a type, not columns: test_scalar_macros_document_params_and_type")
    assert q.columns, f"{name}.sql documents no columns"
    if q.kind == "view":
        rel = f"SELECT * FROM {name}"
    else:
        rel = f"SELECT * FROM {name}()"  # macros take defaults
    got = [(c[0], str(c[1]).upper()) for c in empty_store.con.execute(f"DESCRIBE {rel}").fetchall()]
    want = [(c[0], c[1].upper()) for c in q.columns]
    assert got == want, f"{name}.sql: output {got} != documented {want}"
    for col, _, meaning in q.columns:
        assert len(meaning) > 8, f"{name}.{col} needs a real description"
        if col.endswith("_ns"):
            assert "ns" in meaning, f"{name}.{col}: say the unit"


@pytest.mark.parametrize("name", sorted(n for n, q in {**QUERIES, **FLEET_QUERIES}.items() if q.kind == "scalar"))
def test_scalar_macros_document_params_and_type(name):
    q = {**QUERIES, **FLEET_QUERIES}[name]
    signature = re.search(rf"MACRO\s+{name}\s*\(([^)]*)\)", q.sql).group(1)
    assert q.doc and list(q.params) == [a.strip() for a in signature.split(",")], name
    assert q.returns and len(q.returns[1]) > 8, f"{name}.sql: say what it returns with @returns TYPE meaning"
    con = duckdb.connect()
    sqlviews.create(con, {name: q})
    args = ", ".join("1.0" for _ in q.params)
    assert con.execute(f"SELECT typeof({name}({args}))").fetchone()[0] == q.returns[0].upper()


def test_fleet_span_mean_is_the_sum_of_one_window_and_the_span_weighted_mean_of_several():
    con = duckdb.connect()
    sqlviews.create(con, {"_fleet_span_mean": FLEET_QUERIES["_fleet_span_mean"]})
    rows = con.execute("""SELECT g, _fleet_span_mean(x, span_s) FROM (VALUES
                              ('one', 2.5, 10.0),
                              ('several', 1.0, 30.0), ('several', 3.0, 10.0), ('several', NULL, 60.0))
                          t(g, x, span_s) GROUP BY g ORDER BY g""").fetchall()
    # one window: its value whatever its span; several: (1 x 30 + 3 x 10) / 40, the NULL window left out
    assert rows == [("one", 2.5), ("several", 1.5)]


def test_internal_helpers_are_read_only_by_views():
    """A `_` name (an internal helper, as in Perfetto's stdlib) is read by another query and named nowhere a user
    or the Python code would rely on it: not in the package's Python, the README or docs/."""
    queries = {**QUERIES, **FLEET_QUERIES}
    helpers = {n for n in queries if n.startswith("_")}
    assert helpers
    readers = {d for q in queries.values() for d in q.depends}
    assert helpers <= readers, f"helpers no query depends on: {sorted(helpers - readers)}"
    texts = [p for p in (ROOT / "stallscope").rglob("*.py") if p.name != "sqlviews.py"]
    texts += [ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]
    for p in texts:
        named = helpers & set(re.findall(r"\w+", p.read_text()))
        assert not named, f"{p.relative_to(ROOT)} names internal helper(s) {sorted(named)}: drop the `_` or stop"


def test_views_work_on_a_read_only_store(tmp_path):
    db = tmp_path / "s.duckdb"
    stallscope.open(db).close()
    with stallscope.open(db, read_only=True) as s:
        sqlviews.install(s.con)
        assert s.sql("SELECT count(*) FROM step_phase").item() == 0


def test_user_phase_rules_override_builtins(traces_store):
    s = traces_store
    sqlviews.install(s.con)
    before = s.sql("SELECT rule_id FROM _kernel_rule WHERE name LIKE '%paged_attention_ll4mi%' LIMIT 1").item()
    assert before == "unified_attention_shared"
    s.con.execute("INSERT INTO phase_rules VALUES ('my_ll4mi', 1, 'paged_attention_ll4mi', 'decode', 'attention', "
                  "'user rule', false)")
    try:
        after = s.sql("SELECT rule_id, phase FROM _kernel_rule WHERE name LIKE '%paged_attention_ll4mi%' LIMIT 1").row(0)
        assert after == ("my_ll4mi", "decode")
    finally:
        s.con.execute("DELETE FROM phase_rules WHERE rule_id = 'my_ll4mi'")


def test_mixed_step_split(traces_store):
    s = traces_store
    sqlviews.install(s.con)
    r = s.sql("SELECT p.* FROM step_phase p JOIN sources USING (source_id) WHERE path LIKE '%mixed_step%'").row(0, named=True)
    assert r["phase"] == "mixed" and r["phase_basis"] == "annotation"
    # 8155 of 8192 tokens are prefill: prefill dominates, decode is small but not zero.
    assert r["prefill_gpu_ns"] > 100 * r["decode_gpu_ns"] > 0
    total = s.sql("SELECT sum(dur_ns) FROM kernel_phase k JOIN sources USING (source_id) WHERE path LIKE '%mixed_step%'").item()
    assert r["prefill_gpu_ns"] + r["decode_gpu_ns"] == total


def test_h100_step_gaps_and_baseline(traces_store):
    s = traces_store
    sqlviews.install(s.con)
    g = s.sql("""SELECT g.step_index, g.gap_ns, b.baseline_ns, g.stalled_decodes FROM step_gaps g
                 JOIN step_baseline b USING (step_id) JOIN sources src ON src.source_id = g.source_id
                 WHERE src.path LIKE '%vllm_h100%' ORDER BY step_index""")
    assert g.height == 10  # the empty last step launched nothing
    ratio = (g["gap_ns"] / g["baseline_ns"]).to_list()
    assert 4.4 < ratio[0] < 5.0 and all(0.9 < r < 1.15 for r in ratio[1:])
    assert g["stalled_decodes"].null_count() == 10
