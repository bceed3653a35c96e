"""`vltools plot LOG.jsonl [...] -o curves.png`: training loss and validation metrics of one or more runs."""

from __future__ import annotations

import click

from vltools.commands.options import primary_output
from vltools.errors import VLToolsError
from vltools.io.progress import log


@primary_output("output")
@click.command("plot")
@click.argument("logs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="PNG file to write.")
@click.option("--metric", "metrics", multiple=True,
              help="Validation field to draw (repeatable), e.g. rsum or i2t_R@1; default: the task's "
                   "model-selection metric (the first field of the validation lines).")
def command(logs: tuple[str, ...], output: str, metrics: tuple[str, ...]) -> None:
    """Draw training loss and validation metrics against iterations from LOGS (PATH.log.jsonl files written by
    `vltools train`); several logs share the figure, one colour per run, to compare them."""
    from vltools.reporting.curves import default_metrics, draw_curves, read_training_log, save_figure

    runs = [read_training_log(path) for path in logs]
    chosen = list(metrics) or default_metrics(runs)
    for name in chosen:
        if not any(run.series(name) for run in runs):
            known = sorted({m for run in runs for m in run.metric_names()})
            raise VLToolsError(f"{', '.join(logs)}: no validation line has {name!r}; "
                               f"use one of {', '.join(known) or '(none: these logs have no validation lines)'}")
    save_figure(draw_curves(runs, chosen), output)
    log.info("wrote %s: loss%s of %d run(s)", output, "".join(f", {m}" for m in chosen), len(runs))
