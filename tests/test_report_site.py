"""`vltools report` on the synthetic world's SGRAF outputs (a tiny SGR model through `vltools match`): the folder's
cards, pages and files, and the page itself in headless Chromium (skipped, with the reason, without Chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from conftest import run_vltools
from matching_helpers import IMG_DIM, REGIONS, save_tiny
from page_reader import read_page
from PIL import Image
from pipeline_fixtures import run_process

from vltools.io.features import FeaturesWriter
from vltools.io.records import caption_ids, read_records, write_records

SAMPLE, TOP_K, PAGE = 7, 4, 5
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars"]


def run(*args: object) -> subprocess.CompletedProcess:
    return run_vltools(*map(str, args), check=True)


def run_fails(*args: object) -> str:
    """The one-line error of a command that must exit 1."""
    result = run_vltools(*map(str, args))
    assert result.returncode == 1, result.stderr.decode()
    message = result.stderr.decode().strip()
    assert len(message.splitlines()) == 1 and message.startswith("vltools: error: ")
    return message


def chunk_cards(site: Path, section: str) -> list[dict]:
    """Every card of a section, read back from its data scripts (VLR.chunk("id", n, [...]);)."""
    cards = []
    for n in range(len(list((site / "data" / section).glob("*.js")))):
        text = (site / "data" / section / f"{n}.js").read_text(encoding="utf-8")
        match = re.fullmatch(r'VLR\.chunk\("([^"]+)", (\d+), (.*)\);\n', text, re.S)
        assert match and match.group(1) == section and int(match.group(2)) == n
        cards += json.loads(match.group(3))
    return cards


def summary_of(site: Path) -> dict:
    text = (site / "data" / "summary.js").read_text(encoding="utf-8")
    assert text.startswith("VLR.summary(") and text.endswith(");\n")
    return json.loads(text[len("VLR.summary("):-3])


def image_sources(value: object) -> list[str]:
    """Every `src` of an image reference in the cards (thumbnails, heatmaps)."""
    if isinstance(value, dict):
        found = [value["src"]] if isinstance(value.get("src"), str) else []
        return found + [s for key, item in value.items() if key != "src" for s in image_sources(item)]
    if isinstance(value, list):
        return [s for item in value for s in image_sources(item)]
    return []


@pytest.fixture(scope="module")
def sgraf(tmp_path_factory):
    """synth world -> random region features -> a tiny random SGR checkpoint -> match (top 10) -> report."""
    root = tmp_path_factory.mktemp("report")
    world = root / "world"
    run("synth", world, "--images", "100", "--pairs", "0", "--aux-images", "0")
    image_ids = [r["image_id"] for r in read_records(world / "images.jsonl", "images")]
    rng = np.random.default_rng(0)
    with FeaturesWriter(root / "feats.h5", {"backbone": "random"}, dtype="float32") as writer:
        writer.add(image_ids, regions=rng.normal(size=(len(image_ids), REGIONS, IMG_DIM)).astype(np.float32))
    save_tiny(root / "sgr.pt", "sgr")
    run("match", "--model", root / "sgr.pt", root / "feats.h5", world / "captions.jsonl", "--split", "test",
        "--top-k", "10", "-o", root / "rankings.jsonl")
    scores = run("score", "retrieval", root / "rankings.jsonl", "--captions", world / "captions.jsonl",
                 "--split", "test")
    (root / "scores.json").write_bytes(scores.stdout)
    site = root / "site"
    run("report", site, "--rankings", root / "rankings.jsonl", "--images", world / "images.jsonl", "--captions",
        world / "captions.jsonl", "--scores", root / "scores.json", "--sample", SAMPLE, "--top-k", TOP_K,
        "--page-size", PAGE, "--seed", "3", "--title", "SGR on the synthetic world")
    return root, world, site


def test_one_card_per_sampled_query_with_k_results_and_the_truth_marked(sgraf):
    root, world, site = sgraf
    rankings = read_records(root / "rankings.jsonl", "rankings")
    records = read_records(world / "captions.jsonl", "captions")
    image_of = dict(zip(caption_ids(records), (r["image_id"] for r in records), strict=True))
    summary = summary_of(site)
    sections = {s["kind"]: s for s in summary["sections"]}
    assert set(sections) == {"i2t", "t2i"}
    for direction, section in sections.items():
        queries = [r for r in rankings if r["direction"] == direction]
        assert section["total"] == len(queries) > SAMPLE
        assert section["count"] == SAMPLE and section["pages"] == -(-SAMPLE // PAGE)
        cards = chunk_cards(site, section["id"])
        assert len(cards) == SAMPLE
        by_query = {r["query"]: r for r in queries}
        order = [r["query"] for r in queries]
        assert [order.index(c["query"]) for c in cards] == sorted(order.index(c["query"]) for c in cards)
        for card in cards:
            ranking = by_query[card["query"]]
            assert [r["id"] for r in card["results"]] == ranking["ids"][:TOP_K]
            truth = (lambda item, q=card["query"]: image_of[item] == q) if direction == "i2t" else \
                (lambda item, q=card["query"]: item == image_of[q])
            assert [r["ok"] for r in card["results"]] == [truth(i) for i in ranking["ids"][:TOP_K]]
            hits = [rank for rank, item in enumerate(ranking["ids"], 1) if truth(item)]
            assert card["first"] == (hits[0] if hits else None)
        assert section["keys"]["rank of the first correct answer"] == [c["first"] for c in cards]


def test_every_image_resolves_to_a_file_in_the_report(sgraf):
    _, world, site = sgraf
    sources = []
    for section in summary_of(site)["sections"]:
        sources += image_sources(chunk_cards(site, section["id"]))
    assert len(sources) >= SAMPLE * TOP_K
    for src in sources:
        assert not src.startswith(("/", "file:", "http")) and ".." not in src
        assert (site / src).is_file()
    thumbs = list((site / "thumbs").rglob("*.jpg"))
    assert len(thumbs) == len(set(sources))  # one thumbnail per image, however often it is shown
    with Image.open(thumbs[0]) as image:
        assert max(image.size) <= 160
    page = read_page(site / "index.html")
    refs = [attrs.get(key) for _, attrs in page.elements for key in ("src", "href") if attrs.get(key)]
    assert "assets/report.js" in refs and any(ref.startswith("thumbs/") for ref in refs)
    for ref in refs:  # links to the sections (#s=ID) name the page's own sections
        assert (site / ref).is_file() if not ref.startswith("#") else ref[1:] in \
            [attrs.get("id") for _, attrs in page.elements], ref


def test_the_page_reads_without_javascript(sgraf):
    """index.html said only "Loading..." without JavaScript: read by an HTML parser (which runs no script), it holds
    the title, the scores and each section's first page of cards, with their captions and the correct answers
    marked."""
    root, _, site = sgraf
    page = read_page(site / "index.html")
    assert page.texts.count("SGR on the synthetic world") == 2  # <title> and the heading
    scores = json.loads((root / "scores.json").read_text())
    plain = {name: value for name, value in scores.items() if isinstance(value, (int, float))}
    assert "rsum" in plain
    for name, value in plain.items():
        assert float(page.texts[page.texts.index(name) + 1]) == pytest.approx(value, rel=1e-3), name
    marked = 0
    for section in summary_of(site)["sections"]:
        first = chunk_cards(site, section["id"])[:PAGE]
        shown = sum(attrs.get("class") == f"card {section['kind']}" for _, attrs in page.elements)
        assert shown == len(first) == PAGE < section["count"]
        assert section["title"] in page.texts
        for card in first:
            assert card["query"] in page.texts
            if section["kind"] == "i2t":
                assert all(r["text"] in page.texts for r in card["results"]) and card["results"][0]["text"]
                marked += sum(r["ok"] for r in card["results"]) + ("first_result" in card)
            else:
                assert card["text"] in page.texts
                marked += sum(r["ok"] for r in card["results"])
    assert marked and page.text.count("\u2713") == marked  # each correct answer shown is checked


def test_header_has_the_scores_and_the_inputs_provenance(sgraf):
    root, _, site = sgraf
    summary = summary_of(site)
    assert summary["title"] == "SGR on the synthetic world"
    assert summary["scores"][0]["values"]["rsum"] == pytest.approx(
        json.loads((root / "scores.json").read_text())["rsum"])
    kinds = Counter(item["kind"] for item in summary["inputs"])
    assert kinds == {"rankings": 1, "images": 1, "captions": 1, "file": 1}
    assert summary["provenance"]["command"].startswith("vltools report") or "report" in \
        summary["provenance"]["command"]


def test_queries_option_and_a_second_run_needs_force(sgraf, tmp_path):
    root, world, site = sgraf
    first = read_records(root / "rankings.jsonl", "rankings")[0]["query"]
    out = tmp_path / "one"
    run("report", out, "--rankings", root / "rankings.jsonl", "--captions", world / "captions.jsonl",
        "--queries", first)
    sections = summary_of(out)["sections"]
    i2t = next(s for s in sections if s["kind"] == "i2t")
    t2i = next(s for s in sections if s["kind"] == "t2i")
    assert [c["query"] for c in chunk_cards(out, i2t["id"])] == [first]
    assert {c["query"].split("#")[0] for c in chunk_cards(out, t2i["id"])} == {first}  # that image's captions
    message = run_fails("report", out, "--rankings", root / "rankings.jsonl")
    assert "not empty" in message and "--force" in message
    run("report", out, "--rankings", root / "rankings.jsonl", "--force")
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def browse(site: Path, profile: Path, fragment: str = "", screenshot: Path | None = None) -> str:
    """The DOM of the page after its scripts ran (virtual time lets every image load), or a screenshot."""
    action = [f"--screenshot={screenshot}", "--window-size=1300,1500"] if screenshot else ["--dump-dom"]
    result = run_process([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=10000",
                          *action, (site / "index.html").as_uri() + fragment],
                         capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def status_of(dom: str) -> dict[str, str]:
    match = re.search(r'<p id="vlr-status"([^>]*)>', dom)
    assert match, "no status element in the page"
    return dict(re.findall(r'data-([a-z]+)="([^"]*)"', match.group(1)))


@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (apt-get install chromium); the page is "
                    "checked in a real browser only where one is available")
def test_the_page_renders_its_cards_and_loads_every_thumbnail_in_chromium(sgraf, tmp_path):
    _, _, site = sgraf
    first, second = summary_of(site)["sections"]
    sort = "&k=rank%20of%20the%20first%20correct%20answer&d=desc"
    views = [(first, f"#s={first['id']}&p=1", PAGE), (first, f"#s={first['id']}&p=2", SAMPLE - PAGE),
             (second, f"#s={second['id']}{sort}", PAGE)]
    for section, fragment, expected in views:
        dom = browse(site, tmp_path / f"profile-{len(fragment)}", fragment)
        status = status_of(dom)
        assert status["state"] == "done"
        assert int(status["cards"]) == expected == dom.count(f'class="card {section["kind"]}"')
        assert int(status["images"]) >= expected
        assert status["loaded"] == status["images"] and status["broken"] == "0"
    # the sorted page: worst first (highest rank of the first correct answer), queries never found last
    cards = chunk_cards(site, second["id"])
    worst_first = sorted(range(SAMPLE), key=lambda i: (cards[i]["first"] is None, -(cards[i]["first"] or 0), i))
    shown = re.findall(r'<div class="qid">([^<]*)</div>', dom)
    assert shown == [cards[i]["query"] for i in worst_first[:PAGE]]
    shot = tmp_path / "page.png"
    browse(site, tmp_path / "profile-shot", screenshot=shot)
    with Image.open(shot) as image:
        assert image.size == (1300, 1500)
        colours = np.asarray(image.convert("RGB")).reshape(-1, 3)
    assert len(np.unique(colours, axis=0)) > 500  # text, thumbnails and badges, not a blank page
    shutil.copyfile(shot, site.parent / "page.png")  # kept beside the report for a person to look at


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    bad = tmp_path / "ranks.jsonl"
    bad.write_text('{"query": "a", "direction": "i2t", "ids": ["x"], "scores": [1.0]}\n'
                   '{"query": "b", "direction": "sideways", "ids": [], "scores": []}\n', encoding="utf-8")
    message = run_fails("report", tmp_path / "out", "--rankings", bad)
    assert "ranks.jsonl: line 2: field 'direction'" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ranks.jsonl"]
    assert run_vltools("report", str(tmp_path / "out")).returncode == 2  # nothing to show: a usage error


def test_a_figure_that_is_not_an_image_is_refused(sgraf, tmp_path):
    """report --figure captions.jsonl copied the JSONL into the report as a figure."""
    root, world, _ = sgraf
    message = run_fails("report", tmp_path / "out", "--rankings", root / "rankings.jsonl", "--figure",
                        world / "captions.jsonl")
    assert message == (f"vltools: error: {world / 'captions.jsonl'}: --figure must be a PNG or JPEG image, but this "
                       "is JSON text; a figure is shown as an image (e.g. score semantic --plot FILE.png)")
    assert not (tmp_path / "out").exists()


def test_images_that_are_none_of_the_rankings_images_are_named_in_a_warning(sgraf, tmp_path):
    """--images of other images drew 0 thumbnails without a word."""
    root, world, _ = sgraf
    other = tmp_path / "other"
    other.mkdir()
    for n, image in enumerate(sorted((world / "images").glob("*.png"))[:3]):
        shutil.copyfile(image, other / f"elsewhere{n}.png")
    result = run("report", tmp_path / "out", "--rankings", root / "rankings.jsonl", "--images", other,
                 "--sample", "2")
    assert (f"report: none of the 3 images of {other} is shown by the report's cards, so it has no thumbnail; "
            "give the images the rankings and captions are of") in result.stderr.decode()
    assert "none of the" not in run("report", tmp_path / "good", "--rankings", root / "rankings.jsonl", "--images",
                                    world / "images.jsonl", "--sample", "2").stderr.decode()


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory):
    """A report with one section of each other kind: i2i (proxy relevance, a heatmap), captions, pair descriptions."""
    from vltools.io.hdf5 import write_arrays

    root = tmp_path_factory.mktemp("kinds")
    world = root / "world"
    run("synth", world, "--images", "12", "--pairs", "10", "--aux-images", "0")
    images = [r["image_id"] for r in read_records(world / "images.jsonl", "images")]
    rng = np.random.default_rng(1)
    write_records(root / "i2i.jsonl", [{"query": q, "direction": "i2i", "ids": [i for i in images if i != q][:TOP_K],
                                        "scores": sorted(rng.random(TOP_K).tolist(), reverse=True)} for q in images])
    vectors = rng.random((len(images), 6))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    write_arrays(root / "proxy.h5", "proxy", {"ids": images, "tfidf/data": vectors.ravel(),
                                              "tfidf/indices": np.tile(np.arange(6), len(images)),
                                              "tfidf/indptr": np.arange(0, 6 * len(images) + 1, 6),
                                              "tfidf/shape": np.array([len(images), 6])})
    (root / "heat").mkdir()
    shutil.copyfile(world / "images" / f"{images[1]}.png", root / "heat" / f"{images[0]}__{images[1]}.png")
    write_records(root / "gen.jsonl", [{"image_id": i, "caption": f"a picture {n}"} for n, i in enumerate(images)])
    write_records(root / "per.jsonl", [{"image_id": i, "CIDEr": n / 10} for n, i in enumerate(images)])
    pair_ids = list(dict.fromkeys(r["pair_id"] for r in read_records(world / "pairs.jsonl", "pairs")))
    write_records(root / "desc.jsonl", [{"pair_id": p, "caption": "they differ"} for p in pair_ids])
    site = root / "site"
    run("report", site, "--rankings", root / "i2i.jsonl", "--proxy", root / "proxy.h5", "--heatmaps", root / "heat",
        "--generated", root / "gen.jsonl", "--item-scores", root / "per.jsonl", "--generated", root / "desc.jsonl",
        "--images", world / "images.jsonl", "--images", world / "pair_images.jsonl", "--captions",
        world / "captions.jsonl", "--pairs", world / "pairs.jsonl", "--page-size", PAGE)
    return site, images, pair_ids


def test_i2i_captions_and_pairs_sections_hold_their_cards(every_kind):
    site, images, pair_ids = every_kind
    kinds = {s["kind"]: s for s in summary_of(site)["sections"]}
    assert set(kinds) == {"i2i", "captions", "pairs"}
    i2i = chunk_cards(site, kinds["i2i"]["id"])
    assert [c["query"] for c in i2i] == images and all(len(c["results"]) == TOP_K for c in i2i)
    assert all(0 < r["relevance"] <= 1 for c in i2i for r in c["results"])
    assert (site / i2i[0]["results"][0]["heatmap"]["src"]).is_file()
    assert kinds["captions"]["keys"] == {"CIDEr": [n / 10 for n in range(len(images))]}
    pairs = chunk_cards(site, kinds["pairs"]["id"])
    assert [c["id"] for c in pairs] == pair_ids and all(len(c["images"]) == 2 and c["refs"] for c in pairs)
    for src in image_sources([i2i, chunk_cards(site, kinds["captions"]["id"]), pairs]):
        assert (site / src).is_file()
    page = read_page(site / "index.html")  # without JavaScript: each kind's first page of cards
    for kind in kinds:
        assert sum(attrs.get("class") == f"card {kind}" for _, attrs in page.elements) == PAGE
    assert [f"a picture {n}" in page.texts for n in range(PAGE + 1)] == [True] * PAGE + [False]
    assert page.texts.count("they differ") == PAGE and "heatmap" in page.texts
    shown = {attrs["src"] for tag, attrs in page.elements if tag == "img"}
    assert shown and shown <= set(image_sources([i2i, chunk_cards(site, kinds["captions"]["id"]), pairs]))


@pytest.mark.skipif(chromium() is None, reason="Chromium is not installed (apt-get install chromium); the page is "
                    "checked in a real browser only where one is available")
def test_every_card_kind_renders_in_chromium(every_kind, tmp_path):
    site, images, pair_ids = every_kind
    kinds = {s["kind"]: s for s in summary_of(site)["sections"]}
    for kind, fragment, expected in (("i2i", "", PAGE), ("captions", "&k=CIDEr&d=desc", PAGE),
                                     ("pairs", "", PAGE)):
        dom = browse(site, tmp_path / f"profile-{kind}", f"#s={kinds[kind]['id']}{fragment}")
        status = status_of(dom)
        assert status["state"] == "done" and int(status["cards"]) == expected
        assert dom.count(f'class="card {kind}"') == expected
        assert status["loaded"] == status["images"] and status["broken"] == "0" and int(status["images"]) >= expected
    assert re.findall(r'<div class="qid">([^<]*)</div>', dom) == pair_ids[:PAGE]


def test_force_on_a_linked_report_folder_refuses_before_touching_it(tmp_path, capsys):
    from vltools.cli import main

    scores = tmp_path / "scores.json"
    scores.write_text('{"CIDEr": 1.5}', encoding="utf-8")
    real, link = tmp_path / "real", tmp_path / "report"
    main(["--quiet", "report", str(real), "--scores", str(scores)])
    assert (real / "index.html").is_file()
    before = sorted(p.relative_to(real) for p in real.rglob("*"))
    link.symlink_to(real)
    with pytest.raises(SystemExit) as exit_info:
        main(["report", str(link), "--scores", str(scores), "--force"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err == (f"vltools: error: {link}: is a symbolic link (to {real}); give the "
                                                 "folder itself or a new folder name\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["real", "report", "scores.json"] and link.is_symlink()
    assert sorted(p.relative_to(real) for p in real.rglob("*")) == before
