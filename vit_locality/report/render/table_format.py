"""A report table held once and written as Markdown, LaTeX and CSV, so the three always agree; shared formatting."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vit_locality.report.load.aggregate import Stat
from vit_locality.report.stats.claims import DIGITS, SHOWN_SCALE

MISSING = "-"
COLUMN_DIGITS = {"top-1 (%)": 2}


@dataclass
class Table:
    stem: str  # file name without extension
    title: str
    headers: list[str]
    rows: list[list[str]]  # what is shown
    records: list[dict[str, Any]]  # the same rows as numbers, for the CSV
    notes: list[str] = field(default_factory=list)  # lines under the table
    parts: list[Table] = field(default_factory=list)  # further tables shown under it, each with its own CSV
    empty: str = "(no complete runs)"  # what the table says without rows: why it has none, where that is known

    def markdown(self) -> str:
        rows = [dict(zip(self.headers, row, strict=True)) for row in self.rows]
        body = format_table(rows) if rows else self.empty
        text = [f"### {self.title}", "", body]
        if self.notes:
            text += ["", *(f"- {note}" for note in self.notes)]
        for part in self.parts:
            text += ["", part.markdown()]
        return "\n".join(text)

    def latex(self) -> str:
        row = lambda cells: " & ".join(latex_escape(c) for c in cells) + " \\\\"
        lines = ["% needs \\usepackage{booktabs}", "\\begin{table}[t]", "\\centering"]
        lines += [f"\\caption{{{latex_escape(self.title)}}}", f"\\begin{{tabular}}{{{'l' * len(self.headers)}}}"]
        lines += ["\\toprule", row(self.headers), "\\midrule", *map(row, self.rows)]
        lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
        if self.notes:
            lines += ["\\begin{itemize}", *(f"\\item {latex_escape(n)}" for n in self.notes), "\\end{itemize}"]
        for part in self.parts:
            lines += ["", part.latex()]
        return "\n".join(lines)

    def write(self, out_dir: Path) -> list[Path]:
        """<stem>.md, <stem>.tex and <stem>.csv, plus one CSV per part; returns the paths written."""
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = [out_dir / f"{self.stem}.md", out_dir / f"{self.stem}.tex"]
        paths[0].write_text(self.markdown() + "\n")
        paths[1].write_text(self.latex() + "\n")
        for table in (self, *self.parts):
            path = out_dir / f"{table.stem}.csv"
            with path.open("w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(table.records[0]) if table.records else [])
                writer.writeheader()
                writer.writerows({k: _csv_value(v) for k, v in rec.items()} for rec in table.records)
            paths.append(path)
        return paths


def format_figure(stat: Stat, figure: str) -> str:
    """A headline figure as printed: accuracy in percent, the others as recorded."""
    scale = SHOWN_SCALE[figure]
    return format_stat(Stat(scale * stat.mean, scale * stat.std, stat.n), DIGITS[figure])


def format_stat(stat: Stat, digits: int) -> str:
    """'mean' for one value, 'mean ± std (n)' for several, '-' for none."""
    if stat.n == 0:
        return MISSING
    if stat.n == 1:
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.std:.{digits}f} ({stat.n})"


def format_difference(figure: str, value: float, low: float, high: float) -> tuple[str, str]:
    """A signed difference of `figure` and its interval, one decimal more than the figure; '-' and 'n/a' for none."""
    scale, digits = SHOWN_SCALE[figure], DIGITS[figure] + 1
    shown = MISSING if math.isnan(value) else f"{scale * value:+.{digits}f}"
    interval = "n/a" if math.isnan(low) else f"[{scale * low:+.{digits}f}, {scale * high:+.{digits}f}]"
    return shown, interval


def latex_escape(text: str) -> str:
    specials = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_"}
    specials.update({"{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"})
    escaped = "".join(specials.get(ch, ch) for ch in text)
    for plain, math_mode in (("±", "$\\pm$"), ("->", "$\\to$"), ("Δ", "$\\Delta$"), ("<=", "$\\le$"), (">=", "$\\ge$")):
        escaped = escaped.replace(plain, math_mode)
    return escaped


def figure_label(figure: str) -> str:
    return {"acc1": "top-1 (%)", "min_mad": "min MAD", "entropy": "entropy"}[figure]


def _csv_value(value: Any) -> Any:
    """Full precision for numbers (round trips), an empty field for a missing one."""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return "" if value is None else value


def format_table(rows: list[dict[str, Any]]) -> str:
    """A plain fixed-width table (Markdown-compatible); numbers to COLUMN_DIGITS, else 4 decimals."""
    if not rows:
        return "(no complete runs)"
    headers = list(rows[0])
    cells = [
        [f"{v:.{COLUMN_DIGITS.get(k, 4)}f}" if isinstance(v, float) else str(v) for k, v in row.items()] for row in rows
    ]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(c) for c in cells)])
