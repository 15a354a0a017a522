"""Log text, column-wise: timestamps, `LEVEL MM-DD hh:mm:ss [file:line] msg` records, `%.1f` numbers and the
time-sorted line buffer, shared by the simulator's server logs (emit_logs) and the capture's (capture/writers)."""
from __future__ import annotations

import numpy as np
import polars as pl


def ts_text(ns: pl.Expr, fmt: str) -> pl.Expr:
    return pl.from_epoch(ns, time_unit="ns").dt.strftime(fmt)


class Lines:
    """(time ns, order, text) rows, assembled into one sorted text at the end."""

    def __init__(self):
        self.frames: list[pl.DataFrame] = []
        self.seq = 0

    def add(self, t_ns, text) -> None:
        t = np.atleast_1d(np.asarray(t_ns, dtype=np.int64))
        if isinstance(text, pl.Series):
            s = text
        else:
            s = pl.Series(np.atleast_1d(np.asarray(text, dtype=object)).tolist(), dtype=pl.String)
        self.frames.append(pl.DataFrame({"t": t, "o": np.arange(self.seq, self.seq + len(t), dtype=np.int64),
                                         "s": s}))
        self.seq += len(t)

    def text(self) -> bytes:
        df = pl.concat(self.frames).sort(["t", "o"])
        return ("\n".join(df["s"].to_list()) + "\n").encode()


def record(prefix: str, level: str, file_line: str, t_ns: np.ndarray, msg: pl.Expr | str) -> pl.Series:
    """`{prefix}LEVEL MM-DD hh:mm:ss [file:line] msg` for each time."""
    df = pl.DataFrame({"t": np.asarray(t_ns, dtype=np.int64)})
    m = msg if isinstance(msg, pl.Expr) else pl.lit(msg)
    return df.select(pl.concat_str([pl.lit(f"{prefix}{level} "), ts_text(pl.col("t"), "%m-%d %H:%M:%S"),
                                    pl.lit(f" [{file_line}] "), m]).alias("s"))["s"]


def f1(col: str) -> pl.Expr:
    """`%.1f` of a non-negative float column."""
    c = (pl.col(col) * 10).round(0).cast(pl.Int64)
    return pl.concat_str([(c // 10).cast(pl.String), pl.lit("."), (c % 10).cast(pl.String)])
