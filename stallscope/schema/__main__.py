"""Print docs/schema.md: `python -m stallscope.schema > docs/schema.md`."""
from . import render_markdown

print(render_markdown(), end="")
