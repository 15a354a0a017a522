"""Discrete-event simulator of an iteration-level LLM engine, and emitters of real-format artifacts (issue 4).

Modules: `workload` (arrivals, lengths, incidents, store replay), `stepmodel` (step-time model and presets with
their sources), `engine` (scheduler policies, KV cache, preemption), `runner` (one run and its clocks), `truth`
(ground truth: gaps, spikes, culprits, goodput), `emit_kineto` / `emit_bench` / `emit_logs` (trace, benchmark
JSON, vLLM/TGI/SGLang logs), `artifacts` (writes them all), `cli` (`stallscope simulate`).
"""
