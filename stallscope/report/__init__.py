"""Reports people read: the incident page (Markdown, self-contained HTML, figures), the terminal summary and the
Perfetto export, rendered from what `analyze` (and `recommend`) computed."""
from __future__ import annotations

import importlib

__all__ = ["figures"]


def __getattr__(name: str):
    # `stallscope.report.figures.timeline(store)` is the notebook API; matplotlib is imported on first use, not by
    # every CLI command (the CLI registers the report commands, and matplotlib is ~0.4 s of its start-up).
    if name == "figures":
        return importlib.import_module(".figures", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
