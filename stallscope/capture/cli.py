"""The `stallscope capture` command: serve a small real model under torch.profiler and write trace, bench JSON, log.

Importing this module never imports torch (the `capture` extra is optional); without torch the command says in
one line how to install it.
"""
from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional

import typer

from .. import cliopts

from stallscope.errors import StallscopeError

INSTALL_HINT = "stallscope capture needs PyTorch: pip install 'stallscope[capture]'"


class Device(str, Enum):
    cpu = "cpu"
    cuda = "cuda"


class Policy(str, Enum):
    chunked = "chunked"
    unchunked = "unchunked"


def capture_cmd(
    out: Path = typer.Option(..., "--out", "-o", help="Directory to write trace, bench JSON and server log into."),
    device: Device = typer.Option(Device.cpu, help="cpu, or cuda (CUDA activities recorded, CUDA graphs off)."),
    policy: Policy = typer.Option(Policy.chunked, help="chunked (vLLM V1: decodes first, counted in the budget) or "
                                                       "unchunked (prefill-first: decodes wait for whole prompts)."),
    budget: Optional[int] = typer.Option(None, callback=cliopts.positive,
                                         help="Token budget per step (max_num_batched_tokens). Default 512 "
                                              "chunked, max-model-len unchunked."),
    duration: float = typer.Option(30.0, callback=cliopts.positive,
                                   help="Seconds during which requests arrive (the run then drains)."),
    rate: float = typer.Option(4.0, callback=cliopts.positive, help="Request rate (req/s), Poisson arrivals."),
    burstiness: float = typer.Option(1.0, callback=cliopts.positive,
                                     help="Gamma shape of inter-arrival gaps (1 = Poisson)."),
    prompt_len: str = typer.Option("96:0.5", help="Prompt tokens: MEAN (fixed) or MEAN:SIGMA (lognormal)."),
    output_len: str = typer.Option("64:0.4", help="Output tokens: MEAN or MEAN:SIGMA."),
    incident: Optional[str] = typer.Option("long-prompts:count=3,tokens=1536,spacing=2",
                                           help="long-prompts[:count=N,tokens=N,at=S,spacing=S], burst[:count=N,at=S] "
                                                "or none (default at = half the duration)."),
    max_num_seqs: int = typer.Option(16, callback=cliopts.positive, help="Maximum running requests (KV-cache slots)."),
    layers: int = typer.Option(2, callback=cliopts.positive, help="Transformer layers."),
    d_model: int = typer.Option(512, callback=cliopts.positive, help="Model width."),
    heads: int = typer.Option(8, callback=cliopts.positive, help="Attention heads."),
    kv_heads: int = typer.Option(2, callback=cliopts.positive, help="KV heads (GQA groups)."),
    ffn: int = typer.Option(1536, callback=cliopts.positive, help="MLP width (SwiGLU)."),
    max_model_len: int = typer.Option(4096, callback=cliopts.positive,
                                      help="Longest request (prompt + output), the KV slot size."),
    threads: int = typer.Option(1, callback=cliopts.non_negative, help="torch CPU threads (0 = torch's default)."),
    drain: float = typer.Option(60.0, callback=cliopts.positive,
                                help="Seconds after the last arrival before unfinished requests are cut off."),
    seed: int = typer.Option(0, help="Seed of the workload and the weights."),
    record_shapes: bool = typer.Option(True, "--record-shapes/--no-record-shapes",
                                       help="Input shapes on every op (costs the profiler ~2-5 MB of memory per "
                                            "step on CPU)."),
):
    """Run a small real transformer server loop under torch.profiler; write a Kineto trace, a bench JSON, a log."""
    try:
        import torch  # noqa: F401  (the optional extra)
    except ImportError:
        raise StallscopeError(INSTALL_HINT) from None
    from .model import ModelConfig
    from .runner import CaptureSpec, capture

    spec = CaptureSpec(device=device.value, policy=policy.value, budget=budget, duration_s=duration, rate=rate,
                       burstiness=burstiness, prompt_len=prompt_len, output_len=output_len, incident=incident,
                       max_num_seqs=max_num_seqs, seed=seed, threads=threads or None, drain_s=drain,
                       record_shapes=record_shapes,
                       model=ModelConfig(d_model=d_model, n_layers=layers, n_heads=heads, n_kv_heads=kv_heads,
                                         ffn=ffn, max_model_len=max_model_len))
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[info]}"),
                  TimeElapsedColumn(), console=console, transient=True, refresh_per_second=4,
                  disable=not console.is_terminal) as prog:
        task = prog.add_task(f"capture {spec.policy}", total=duration, info="starting")

        def on_progress(p: dict) -> None:
            if p.get("phase") == "export":
                prog.update(task, completed=duration, description="torch.profiler: writing the trace",
                            info=f"{p['steps']:,} steps")
                return
            desc = f"capture {spec.policy}" if p["t_s"] < duration else f"capture {spec.policy} (draining)"
            prog.update(task, completed=min(p["t_s"], duration), description=desc,
                        info=f"{p['steps']:,} steps, {p['running']} running, {p['waiting']} waiting, "
                             f"{p['finished']}/{p['requests']} done")

        res = capture(spec, out, on_progress)
    summary = res.summary()
    for kind, path in res.files.items():
        typer.echo(f"{kind:>6}: {path}")
    typer.echo("capture: " + json.dumps(summary))
    if summary["unfinished"]:
        sys.stderr.write(f"note: {summary['unfinished']} requests were not finished when the drain limit passed; "
                         "they are failed requests in the bench JSON\n")
