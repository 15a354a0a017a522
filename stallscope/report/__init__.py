"""Reports people read: the incident page (Markdown, self-contained HTML, figures), the terminal summary and the
Perfetto export, rendered from what `analyze` (and `recommend`) computed."""
from __future__ import annotations

from . import figures  # noqa: F401 - `stallscope.report.figures.timeline(store)` is the notebook API

__all__ = ["figures"]
