"""The analyses in queries/*.sql: one documented view or macro per file, every output column documented."""
from __future__ import annotations

import pytest

import stallscope
from stallscope import sqlviews

QUERIES = sqlviews.all_queries()


@pytest.fixture(scope="module")
def empty_store():
    s = stallscope.open(":memory:")
    sqlviews.install(s.con)
    return s


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_documented_columns_are_the_output_columns(empty_store, name):
    q = QUERIES[name]
    assert q.doc, f"{name}.sql has no description"
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
