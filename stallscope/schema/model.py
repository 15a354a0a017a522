"""The schema's two types, a table and its columns: the bottom of stallscope.schema (its table modules and its
renderers import these, nothing here imports them back)."""
from __future__ import annotations

from dataclasses import dataclass, field

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Col:
    name: str
    type: str
    unit: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    cols: tuple[Col, ...]
    group: str = ""
    # Tables whose rows belong to one source are deleted with it on re-ingest.
    per_source: bool = True
    indexes: tuple[str, ...] = field(default_factory=tuple)

    def ddl(self) -> str:
        body = ",\n  ".join(f"{c.name} {c.type}" for c in self.cols)
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n  {body}\n)"

    def col(self, name: str) -> Col:
        for c in self.cols:
            if c.name == name:
                return c
        raise KeyError(f"{self.name}.{name}")

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.cols]
