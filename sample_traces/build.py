"""Regenerates the committed scenarios of sample_traces/ from their specs (python sample_traces/build.py [NAME...]).

Each scenario is one `stallscope simulate` run; the equivalent command line is written into its README.md. The
same spec gives the same bytes, and tests/test_simulate_scenarios.py checks that the committed files still match.
"""
from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
COMPRESS = ("bench", "vllm")   # keep each scenario under 5 MB; the trace is always gzipped

SCENARIOS = {
    "unchunked-long-prompt-stall": dict(
        policy="v0", budget=32768, rate=2.9, duration_s=60.0, prompt_len="128:0.4", output_len="1000:0.3",
        incident="long-prompts:count=4,tokens=8192,at=40,spacing=3", seed=11,
        slo="ttft=2s,tpot=50ms,itl=200ms", trace_layers=1,
        story=("vLLM V0-style scheduling without chunked prefill (max_num_batched_tokens 32768) on Llama-70B, H100 "
               "TP4. About 64 requests are decoding (short prompts, ~1000-token outputs) when four 8,192-token "
               "prompts arrive 3 s apart at t = 40 s. Each is prefilled in a prefill-only step of ~0.6 s during "
               "which no running request advances: every running stream sees one ~630 ms gap against a ~25 ms "
               "median, and fails a 200 ms ITL SLO. Mean TPOT barely moves (one stall spread over ~1000 tokens), "
               "so vLLM's own TTFT/TPOT goodput misses the incident; the ITL criterion catches it.")),
    "chunked-2048-healthy": dict(
        policy="chunked", budget=2048, rate=2.9, duration_s=60.0, prompt_len="128:0.4", output_len="1000:0.3",
        incident="long-prompts:count=4,tokens=8192,at=40,spacing=3", seed=11,
        slo="ttft=2s,tpot=50ms,itl=200ms", trace_layers=1,
        story=("The same workload and seed as unchunked-long-prompt-stall, served with vLLM V1 / Sarathi stall-free "
               "chunked prefill at max_num_batched_tokens 2048. Each 8k prompt is split into 2048-token budget "
               "chunks that ride in mixed steps together with every running decode; a mixed step takes ~150-170 ms, "
               "so gaps stay under the 200 ms ITL SLO and every request is good. The mixed steps still exceed 3x "
               "the decode step, so truth.json lists them as relative-rule spikes (rule 'relative').")),
    "chunked-8192-tpot-violations": dict(
        policy="chunked", budget=8192, rate=3.0, duration_s=40.0, prompt_len="3000:0.6", output_len="300:0.3",
        incident=None, seed=5, slo="ttft=5s,tpot=50ms", trace_layers=1,
        story=("vLLM V1 chunked prefill with a large budget (max_num_batched_tokens 8192) under a steady stream of "
               "long prompts (3000 tokens on average, 3 req/s). Big mixed steps of 200-650 ms are frequent enough "
               "that the mean time per output token of about half the requests exceeds the 50 ms TPOT SLO, although "
               "no single request is stalled for long. Removing the prefill-attributed excess (the counterfactual) "
               "would make every request good: the goodput lost is prefill-decode interference.")),
}


def spec_of(name: str):
    from stallscope.simulate.runner import RunSpec, parse_slo

    kw = {k: v for k, v in SCENARIOS[name].items() if k not in ("story",)}
    kw["slo"] = parse_slo(kw["slo"])
    return RunSpec(**kw)


def command_of(name: str) -> str:
    sc = SCENARIOS[name]
    parts = [f"stallscope simulate --profile llama70b-h100-tp4 --policy {sc['policy']} --budget {sc['budget']}",
             f"--rate {sc['rate']:g} --duration {sc['duration_s']:g} --prompt-len {sc['prompt_len']}",
             f"--output-len {sc['output_len']}"]
    if sc["incident"]:
        parts.append(f"--incident {sc['incident']}")
    parts.append(f"--seed {sc['seed']} --slo {sc['slo']} --trace-layers {sc['trace_layers']}")
    parts.append(f"--gzip {','.join(COMPRESS)} --out sample_traces/{name}")
    return " \\\n    ".join(parts)


def build(name: str, out: Path | None = None) -> dict:
    from stallscope.simulate import artifacts, truth
    from stallscope.simulate.runner import execute

    out = out or HERE / name
    run = execute(spec_of(name))
    a = truth.Analysis(run)
    written = artifacts.write_all(run, out, compress=COMPRESS, analysis=a)
    (out / "README.md").write_text(readme(name, run, a, written))
    return written


def readme(name: str, run, a, written) -> str:
    import numpy as np

    s = a.summary()
    sim = run.sim
    sc = SCENARIOS[name]
    g = a.g
    long_req = np.nonzero(run.workload.prompt_len >= 8192)[0]
    lines = [f"# {name}", "", sc["story"], "", "## Reproduce", "", "```", command_of(name), "```", "",
             "## What truth.json says", "",
             f"- {s['requests']} requests, {s['steps']:,} engine steps "
             f"({', '.join(f'{k} {v:,}' for k, v in s['steps_by_kind'].items())}), benchmark duration "
             f"{s['duration_s']:.1f} s.",
             f"- Median decode gap {s['median_decode_gap_ms']:.1f} ms, longest gap {s['max_gap_ms']:.1f} ms.",
             ]
    if len(long_req):
        big_steps = np.unique(sim.ch_step[np.isin(sim.ch_req, long_req)])
        cont = np.zeros(len(g["gap_ms"]), bool)
        for st in big_steps:
            cont |= (g["s_prev"] < st) & (g["s_next"] >= st)
        stalled = sim.decoders[big_steps]
        lines.append(f"- Gaps containing prefill work of a prompt of 8,192 tokens or more: {int(cont.sum()):,}, from "
                     f"{g['gap_ms'][cont].min():.1f} to {g['gap_ms'][cont].max():.1f} ms "
                     f"({g['gap_ms'][cont].max() / s['median_decode_gap_ms']:.1f}x the median gap); "
                     f"{int(stalled.min())}-{int(stalled.max())} decoding requests were running at each of those steps.")
    lines += [
        f"- Spikes (gap > {a.k:g} x predicted decode-only step"
        + (f", or > ITL SLO {a.slo['itl']:g} ms" if "itl" in a.slo else "") + f"): {s['spikes']:,} "
        f"({s['spikes_ambiguous']:,} within 10 % of a threshold), causes {s['spikes_by_cause']}.",
        f"- SLOs {', '.join(f'{k} <= {v:g} ms' for k, v in a.slo.items())}: {s['good']} good requests, "
        f"goodput {s['goodput_rps']:.3f} req/s; counterfactual without prefill interference "
        f"{s['good_counterfactual']} good, {s['goodput_counterfactual_rps']:.3f} req/s; goodput lost "
        f"{s['goodput_lost_rps']:.3f} req/s. Passing per SLO: {s['slo_pass']}.",
        "", "## Files", "",
    ]
    desc = {"trace": "Kineto trace of the rank-0 worker (vLLM V0 model_runner windows)" if run.spec.policy == "v0"
            else "Kineto trace of the rank-0 worker (vLLM V1 execute_model windows + execute_context annotations)",
            "bench": "`vllm bench serve --save-result --save-detailed` result (gzip)",
            "vllm": ("vLLM 0.8.3 V0 server log (gzip)" if run.spec.policy == "v0" else
                     "vLLM 0.10.1.1 V1 server log (gzip)"),
            "tgi": "TGI v3.0 router log of the same requests (Success records)",
            "sglang": "SGLang 0.5.10 scheduler log", "truth": "ground truth (see ../README.md)"}
    for kind, p in written.items():
        lines.append(f"- `{p.name}` ({p.stat().st_size / 1e6:.2f} MB): {desc[kind]}")
    lines += ["", "Load the artifacts: `stallscope ingest sample_traces/" + name + "/*.gz sample_traces/" + name
              + "/*.log --db demo.duckdb`, then `stallscope steps --db demo.duckdb`.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    names = sys.argv[1:] or list(SCENARIOS)
    for nm in names:
        w = build(nm)
        total = sum(p.stat().st_size for p in w.values())
        print(f"{nm}: {total / 1e6:.2f} MB in {len(w)} files")
