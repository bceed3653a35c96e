"""`vltools plot`: two training logs give two curves per panel, drawn from the logged values."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from vltools.reporting.curves import default_metrics, draw_curves, read_training_log
from vltools.training.state import JsonLog


def write_log(path, losses, rsums, every=10):
    """A log in the trainer's own format (config line, train lines, val lines) through its JsonLog writer."""
    writer = JsonLog(path, None, True)
    writer.write({"type": "config", "config": {"train": {"lr": 2e-4}}, "world_size": 1})
    for n, loss in enumerate(losses, 1):
        writer.write({"type": "train", "epoch": 1, "iteration": n * every, "loss": loss, "grad_norm": 1.0,
                      "lr": 2e-4, "seconds_per_step": 0.1})
    for n, rsum in enumerate(rsums, 1):
        writer.write({"type": "val", "epoch": n, "iteration": n * every * len(losses) // len(rsums), "rsum": rsum,
                      "i2t_R@1": rsum / 6, "best": True})
    return path


@pytest.fixture
def two_logs(tmp_path):
    a = write_log(tmp_path / "sgr.pt.log.jsonl", [2.0, 1.5, 1.1, 0.9], [50.0, 120.5])
    b = write_log(tmp_path / "saf.pt.log.jsonl", [2.2, 1.9, 1.2, 0.7], [40.0, 150.25])
    return a, b


def test_read_training_log_keeps_losses_and_validations(two_logs):
    run = read_training_log(two_logs[0])
    assert run.label == "sgr.pt"
    assert run.loss == [(10, 2.0), (20, 1.5), (30, 1.1), (40, 0.9)]
    assert run.series("rsum") == [(20, 50.0), (40, 120.5)]
    assert run.metric_names() == ["rsum", "i2t_R@1"]
    assert default_metrics([run]) == ["rsum"]


def test_draw_curves_plots_each_log_in_each_panel(two_logs):
    runs = [read_training_log(p) for p in two_logs]
    figure = draw_curves(runs, ["rsum"])
    loss_axis, val_axis = figure.axes
    assert [line.get_label() for line in loss_axis.get_lines()] == ["sgr.pt", "saf.pt"]
    assert [list(line.get_ydata()) for line in loss_axis.get_lines()] == [[2.0, 1.5, 1.1, 0.9], [2.2, 1.9, 1.2, 0.7]]
    assert [list(line.get_xdata()) for line in val_axis.get_lines()] == [[20, 40], [20, 40]]
    assert [list(line.get_ydata()) for line in val_axis.get_lines()] == [[50.0, 120.5], [40.0, 150.25]]
    colours = {line.get_color() for line in loss_axis.get_lines()}
    assert len(colours) == 2


def test_plot_command_writes_a_png_with_two_coloured_curves(two_logs, tmp_path, vltools_cmd):
    out = tmp_path / "curves.png"
    result = vltools_cmd("plot", *two_logs, "-o", out)
    assert result.returncode == 0, result.stderr.decode()
    image = Image.open(out).convert("RGB")
    assert image.size == (900, 360)  # two panels of 4.5 x 3.6 inches at 100 dpi
    pixels = np.asarray(image).reshape(-1, 3).astype(int)
    # matplotlib's first two default colours (C0 blue #1f77b4, C1 orange #ff7f0e) are both drawn
    for colour in ((0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)):
        assert (np.abs(pixels - colour).sum(axis=1) < 30).sum() > 100


def test_plot_errors_are_one_line(tmp_path, two_logs, vltools_cmd):
    bad = tmp_path / "bad.log.jsonl"
    bad.write_text(json.dumps({"type": "train", "iteration": 1, "loss": 1.0}) + "\n{oops\n", encoding="utf-8")
    result = vltools_cmd("plot", bad, "-o", tmp_path / "x.png")
    assert result.returncode == 1
    assert result.stderr.decode().strip().startswith(f"vltools: error: {bad}: line 2: malformed JSON")
    result = vltools_cmd("plot", two_logs[0], "--metric", "cider", "-o", tmp_path / "x.png")
    assert result.returncode == 1 and "use one of i2t_R@1, rsum" in result.stderr.decode()
    assert not (tmp_path / "x.png").exists()
