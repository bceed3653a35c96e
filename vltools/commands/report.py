"""`vltools report OUT/`: a static HTML gallery of rankings, captions, scores and provenance."""

from __future__ import annotations

import click

from vltools.commands.options import SEED_RANGE, Integer, primary_output

FILE = click.Path(dir_okay=False)


@primary_output("out")
@click.command("report")
@click.argument("out", type=click.Path(file_okay=False))
@click.option("--rankings", multiple=True, type=FILE, help="Rankings JSONL of match (i2t, t2i and/or i2i); repeatable.")
@click.option("--generated", multiple=True, type=FILE,
              help="Generated captions JSONL ({image_id, caption}) or pair descriptions ({pair_id, caption}); "
                   "repeatable.")
@click.option("--item-scores", multiple=True, type=FILE,
              help="Per-item metrics JSONL (score caption --per-image) of the --generated file in the same "
                   "position; makes the cards sortable by each metric.")
@click.option("--images", multiple=True, type=click.Path(),
              help="Where the images are: images JSONL ({image_id, path}), a folder or a list of paths, as "
                   "extract-regions reads them; repeatable (e.g. images.jsonl and pair_images.jsonl).")
@click.option("--captions", type=FILE, help="Captions JSONL: caption texts, each caption's image (the ground truth "
              "of i2t / t2i) and the references of generated image captions.")
@click.option("--pairs", type=FILE, help="Pairs JSONL: each pair's two images and its reference descriptions.")
@click.option("--scores", multiple=True, type=FILE, help="Metrics JSON printed by vltools score; repeatable.")
@click.option("--proxy", type=FILE, help="Proxy HDF5 (tfidf-proxy): the relevance shown beside i2i results.")
@click.option("--heatmaps", type=click.Path(file_okay=False),
              help="Folder of heatmaps shown beside i2i results (vltools explain -o FOLDER), QUERY__RESULT.png or "
                   "QUERY/RESULT.png.")
@click.option("--log", "logs", multiple=True, type=FILE, help="Training log (PATH.log.jsonl) to draw; repeatable.")
@click.option("--figure", "figures", multiple=True, type=FILE,
              help="A PNG to show in the header (e.g. score semantic --plot); repeatable.")
@click.option("--queries", help="Show only these query / item ids: comma-separated, or @FILE with one id a line "
              "(an image id also picks its captions' t2i queries).")
@click.option("--sample", type=Integer(min=0), default=100, show_default=True,
              help="Queries (and captioned items) drawn at random per section; 0 = all.")
@click.option("--seed", type=SEED_RANGE, default=0, show_default=True, help="Seed of the sample.")
@click.option("--top-k", type=Integer(min=1), default=5, show_default=True, help="Results shown per query.")
@click.option("--page-size", type=Integer(min=1), default=50, show_default=True, help="Cards per page.")
@click.option("--thumb-size", type=Integer(min=16), default=160, show_default=True,
              help="Longer side of the thumbnails in pixels.")
@click.option("--title", default="vltools report", show_default=True)
@click.option("--force", is_flag=True, help="Replace OUT if it holds an earlier report.")
@click.option("--boxes", "boxes_path", type=FILE,
              help="Features HDF5 with /boxes (extract-regions --regions bottom-up or detector): draw each image's "
                   "boxes with their object and attribute labels (\"red car\") on its thumbnail; leave out to draw "
                   "none.")
@click.option("--max-boxes", type=Integer(min=1), default=10, show_default=True,
              help="Boxes drawn per image, the highest-scoring first.")
def command(out: str, rankings: tuple[str, ...], generated: tuple[str, ...], item_scores: tuple[str, ...],
            images: tuple[str, ...], captions: str | None, pairs: str | None, scores: tuple[str, ...],
            proxy: str | None, heatmaps: str | None, logs: tuple[str, ...], figures: tuple[str, ...],
            queries: str | None, sample: int, seed: int, top_k: int, page_size: int, thumb_size: int, title: str,
            force: bool, boxes_path: str | None, max_boxes: int) -> None:
    """Write OUT/, a static HTML report that opens from file:// or any web server (open OUT/index.html): the
    ranked results of sampled queries with the ground truth marked, generated captions beside their references,
    the scores, training curves and the provenance of every input. Images become thumbnails inside OUT."""
    from vltools.reporting.site import ReportInputs, build_report

    inputs = ReportInputs(rankings, generated, item_scores, images, captions, pairs, scores, proxy, heatmaps, logs,
                          figures, boxes_path)
    build_report(out, inputs, queries, sample, seed, top_k, page_size, thumb_size, title, force, max_boxes)
