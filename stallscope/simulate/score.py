"""Score an analysis report against a simulator run's truth.json: spike recall and precision, culprits, goodput.

Spikes are matched by (request, gap): a report spike names the server request id (or the benchmark index)
and the chunk index that ended the gap (token_index = gap_index + 1). Gaps within the truth's ambiguity band
(default ±10 %) of a threshold they are judged against are dropped from both sides, as truth.json invites:
noise decides those, not the analysis. The top culprit is also scored on strong stalls alone (gap above
4x the predicted decode-only step), where a wrong name misleads most.
"""
from __future__ import annotations

import numpy as np

STRONG = 4.0  # a strong stall: gap above 4x the predicted decode-only step


def _index_of(report_id: str | None, ids: dict[str, int]) -> int | None:
    if report_id is None:
        return None
    if report_id in ids:
        return ids[report_id]
    tail = report_id.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def score(report: dict, doc: dict) -> dict:
    from .truth import gaps_frame

    req = doc["requests"]
    ids = {rid: int(i) for i, rid in zip(req["index"], req["request_id"])}
    rule = doc["spike_rule"]
    k, band, itl = float(rule["k"]), float(rule.get("ambiguous_band", 0.1)), rule.get("itl_ms")

    ts = doc["spikes"]
    truth = {(int(r), int(g)): i for i, (r, g) in enumerate(zip(ts["request"], ts["gap_index"]))}
    t_amb = {key for key, i in truth.items() if ts["ambiguous"][i]}

    # Every gap's distance to its thresholds, for report spikes the truth does not list.
    gaps = gaps_frame(doc)
    t_dec = np.asarray(doc["steps"]["pred_decode_only_ms"], dtype=float)[gaps["last_step"].to_numpy()]
    gms = gaps["gap_ms"].to_numpy()
    near = np.abs(gms - k * t_dec) <= band * k * t_dec
    if itl:
        near |= np.abs(gms - itl) <= band * itl
    amb_gap = {(int(r), int(g)) for r, g, a in zip(gaps["request"], gaps["gap_index"], near) if a}

    ours: dict[tuple[int, int], dict] = {}
    for s in report["spikes"]:
        if s.get("level", "request") != "request":
            continue
        i = _index_of(s["request_id"], ids)
        if i is not None:
            ours[(i, int(s["token_index"]) - 1)] = s
    truth_keys = set(truth) - t_amb
    our_keys = {key for key in ours if key not in t_amb and key not in amb_gap}
    hit = truth_keys & set(ours)
    recall = len(hit) / len(truth_keys) if truth_keys else 1.0
    precision = len(our_keys & set(truth)) / len(our_keys) if our_keys else 1.0

    tops = right = strong = strong_right = 0
    for key in hit:
        i = truth[key]
        want = int(ts["top_culprit"][i])
        if want < 0:
            continue
        tops += 1
        got = ours[key]["culprits"]
        ok = bool(got) and _index_of(got[0]["request_id"], ids) == want
        right += ok
        if ts["gap_ms"][i] > STRONG * ts["pred_decode_ms"][i]:
            strong += 1
            strong_right += ok
    s = doc["summary"]

    def rel(a, b):
        return abs(a - b) / abs(b) if b else abs(a - b)

    return {
        "truth_spikes": len(truth_keys), "report_spikes": len(our_keys), "matched": len(hit),
        "recall": recall, "precision": precision,
        "top_culprit_checked": tops, "top_culprit_accuracy": right / tops if tops else 1.0,
        "strong_checked": strong, "strong_top_culprit_accuracy": strong_right / strong if strong else 1.0,
        "goodput_rps": report["goodput_rps"], "truth_goodput_rps": s["goodput_rps"],
        "goodput_rel_err": rel(report["goodput_rps"] or 0.0, s["goodput_rps"]),
        "goodput_lost_rps": report["goodput_lost_rps"], "truth_goodput_lost_rps": s["goodput_lost_rps"],
        "goodput_lost_rel_err": rel(report["goodput_lost_rps"] or 0.0, s["goodput_lost_rps"]),
    }
