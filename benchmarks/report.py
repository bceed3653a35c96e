"""Benchmark of `vltools report` at 10k queries: writing time, and what a browser loads to show one page.

A synthetic world (`vltools synth`, 2000 images) and 10k random text-to-image rankings (top 10 over its images)
are written to a temporary folder; the report of all 10k queries (`--sample 0`) is written and measured:
  - write_s / write_cpu_s: the library's report writer (sections, 2000 thumbnails, 200 page files, header);
  - page_kb: what the page loads to show page 1 (index, script, style, summary, one page of cards);
  - all_cards_kb: the same cards in one data file, as a report without paging would load them;
  - ratio = page_kb / (page_kb - one page + all cards) (target: at most 0.1 at 10k queries);
  - browser_s: seconds headless Chromium takes to render page 100 of a sorted view, if Chromium is installed.
Prints readable lines, then one JSON object on the last line.

    python benchmarks/report.py [--queries 10000] [--images 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from machine import cpu_model

from vltools.io.progress import configure
from vltools.io.records import caption_ids, read_records, write_records
from vltools.reporting.gallery import ranking_sections, read_references
from vltools.reporting.site import Header, write_report
from vltools.synth.world import WorldOptions, write_world
from vltools.vision.images import list_inputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10000)
    parser.add_argument("--images", type=int, default=2000)
    args = parser.parse_args()
    configure(quiet=True)
    with tempfile.TemporaryDirectory(prefix="vltools-report-bench-") as folder:
        root = Path(folder)
        write_world(root / "world", WorldOptions(seed=0, images=args.images, pairs=0, aux_images=0))
        captions = read_records(root / "world" / "captions.jsonl", "captions")
        ids, images = caption_ids(captions), sorted({r["image_id"] for r in captions})
        rng = random.Random(0)
        rankings = root / "rankings.jsonl"
        if len(ids) < args.queries:
            parser.error(f"{args.images} images have {len(ids)} captions; give --images >= --queries / 5")
        write_records(rankings, ({"query": query, "direction": "t2i", "ids": rng.sample(images, 10),
                                  "scores": sorted((rng.random() for _ in range(10)), reverse=True)}
                                 for query in ids[:args.queries]))
        start, cpu = time.perf_counter(), time.process_time()
        refs = read_references(str(root / "world" / "captions.jsonl"), None)
        sections = ranking_sections(str(rankings), refs, None, 0, 0, 5, None, None, set())
        counts = write_report(root / "site", Header("bench"), sections,
                              list_inputs([root / "world" / "images.jsonl"]), 160, 50, False)
        write_s, write_cpu_s = time.perf_counter() - start, time.process_time() - cpu
        site = root / "site"
        section = sections[0].id
        pages = sorted((site / "data" / section).glob("*.js"))
        shell = sum((site / p).stat().st_size for p in ("index.html", "assets/report.js", "assets/report.css",
                                                        "data/summary.js"))
        page_kb = (shell + pages[0].stat().st_size) / 1024
        all_cards_kb = sum(p.stat().st_size for p in pages) / 1024
        unpaged_kb = shell / 1024 + all_cards_kb
        browser_s = None
        chromium = shutil.which("chromium")
        if chromium:
            start = time.perf_counter()
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                            "--disable-background-networking", "--disable-component-update", "--disable-sync",
                            f"--user-data-dir={root / 'profile'}", "--virtual-time-budget=10000", "--dump-dom",
                            (site / "index.html").as_uri() + f"#s={section}&p=100&k=rank%20of%20the%20first%20"
                            "correct%20answer"], capture_output=True, check=True, timeout=300)
            browser_s = time.perf_counter() - start
    figures = {"queries": args.queries, "cards": counts["cards"], "thumbnails": counts["thumbnails"],
               "write_s": round(write_s, 2), "write_cpu_s": round(write_cpu_s, 2), "page_kb": round(page_kb, 1),
               "all_cards_kb": round(all_cards_kb, 1), "ratio": round(page_kb / unpaged_kb, 4),
               "browser_s": None if browser_s is None else round(browser_s, 2),
               "cpu": cpu_model(), "threads": os.cpu_count(), "torch_threads": os.environ.get("OMP_NUM_THREADS")}
    print(f"CPU: {figures['cpu']}, {figures['threads']} cores")
    print(f"report of {args.queries} queries: written in {write_s:.1f} s ({write_cpu_s:.1f} s CPU), "
          f"{counts['thumbnails']} thumbnails")
    print(f"a page loads {page_kb:.0f} KB; all cards in one file would be {unpaged_kb:.0f} KB "
          f"(ratio {page_kb / unpaged_kb:.3f})")
    if browser_s is not None:
        print(f"headless Chromium: page 100 of the sorted view rendered in {browser_s:.1f} s (wall, with start-up)")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
