"""stallscope: LLM-serving forensics over server logs, GPU traces and benchmark results, in one DuckDB store."""
from importlib.metadata import PackageNotFoundError, version as _v

try:
    __version__ = _v("stallscope")
except PackageNotFoundError:  # running from a source tree without an install
    __version__ = "0.0.0+source"

from .store import Store, open  # noqa: E402,A004 - `stallscope.open` is the notebook entry point

__all__ = ["Store", "open", "__version__"]
