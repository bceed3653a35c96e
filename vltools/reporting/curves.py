"""Training curves: loss and validation metrics against iterations from `train`'s PATH.log.jsonl files.

Several logs share one figure so that runs can be compared; each log is one colour in every panel.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vltools.errors import input_error
from vltools.io.jsonl import iter_json_lines
from vltools.io.output import written

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NOT_METRICS = ("type", "epoch", "iteration", "best")
FIX = "give a PATH.log.jsonl written by vltools train"


@dataclass
class TrainingLog:
    """The train and validation lines of one log: loss per logged iteration, metrics per validation."""

    label: str
    loss: list[tuple[int, float]] = field(default_factory=list)
    val: list[dict] = field(default_factory=list)

    def metric_names(self) -> list[str]:
        """Numeric validation fields in logged order (the task logs its model-selection metric first)."""
        names: list[str] = []
        for record in self.val:
            names += [k for k, v in record.items() if k not in NOT_METRICS and k not in names
                      and isinstance(v, (int, float)) and not isinstance(v, bool)]
        return names

    def series(self, metric: str) -> list[tuple[int, float]]:
        return [(r["iteration"], r[metric]) for r in self.val if isinstance(r.get(metric), (int, float))]


def log_label(path: str | os.PathLike) -> str:
    """`runs/sgr.pt.log.jsonl` -> `sgr.pt`: the checkpoint the log belongs to."""
    name = Path(path).name
    for suffix in (".log.jsonl", ".jsonl"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def read_training_log(path: str | os.PathLike) -> TrainingLog:
    """Parse a training log; a line that is not a JSON object with an integer iteration is a one-line error."""
    result = TrainingLog(log_label(path))
    for number, record in iter_json_lines(path, FIX):
        where = f"line {number}"
        if not isinstance(record, dict) or "type" not in record:
            raise input_error(path, where, "not a training log line (no 'type' field)", FIX)
        if record["type"] not in ("train", "val"):
            continue
        if not isinstance(record.get("iteration"), int):
            raise input_error(path, where, f"{record['type']} line without an integer 'iteration'", FIX)
        if record["type"] == "train" and isinstance(record.get("loss"), (int, float)):
            result.loss.append((record["iteration"], float(record["loss"])))
        elif record["type"] == "val":
            result.val.append(record)
    if not result.loss and not result.val:
        raise input_error(path, None, "no train or val lines", FIX)
    return result


def default_metrics(logs: list[TrainingLog]) -> list[str]:
    """The first log's model-selection metric (its first validation field), if any log validated."""
    for entry in logs:
        names = entry.metric_names()
        if names:
            return names[:1]
    return []


def draw_curves(logs: list[TrainingLog], metrics: list[str]) -> Figure:
    """A matplotlib figure: training loss, then one panel per validation metric; one line per log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["loss", *metrics]
    figure, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels), 3.6), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for n, entry in enumerate(logs):
        colour = colours[n % len(colours)]
        for axis, panel in zip(axes[0], panels, strict=True):
            points = entry.loss if panel == "loss" else entry.series(panel)
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], color=colour, label=entry.label,
                          marker=None if panel == "loss" else "o", markersize=3)
    for axis, panel in zip(axes[0], panels, strict=True):
        axis.set_xlabel("iteration")
        axis.set_title("training loss" if panel == "loss" else f"validation {panel}")
        axis.grid(True, alpha=0.3)
        if axis.get_lines():
            axis.legend(fontsize=8)
    figure.tight_layout()
    return figure


def save_figure(figure: Figure, path: str | os.PathLike) -> None:
    """Write a figure as PNG atomically, then free it."""
    import matplotlib.pyplot as plt

    try:
        with written(path) as tmp:
            figure.savefig(tmp, format="png", dpi=100)
    finally:
        plt.close(figure)
