"""index.html as plain HTML (vltools.reporting.page): what a reader without JavaScript sees, and the escaping of
every id, caption, title and name that comes from the inputs."""

from __future__ import annotations

import json

import pytest
from page_reader import read_page
from PIL import Image

from vltools.io.records import write_records
from vltools.reporting.page import fmt
from vltools.reporting.site import ReportInputs, build_report
from vltools.vision.images import list_inputs

HOSTILE_CAPTION = '<script>alert("caption")</script> & <b>bold</b> &amp; a cat'
HOSTILE_TITLE = "</title><script>alert(1)</script> R&D"
HOSTILE_METRIC = "<i>R@1</i> & co"


@pytest.mark.parametrize(("value", "shown"), [(7, "7"), (3.0, "3"), (0.123456, "0.1235"), (12345.6, "12350"),
                                              (286.79999999999995, "286.8"), (-0.5, "-0.5"), (True, "true"),
                                              (None, "null"), ("R@1", "R@1")])
def test_numbers_read_as_report_js_shows_them(value, shown):
    assert fmt(value) == shown


@pytest.fixture()
def hostile(tmp_path):
    """A report whose image id, captions, title and metric name are markup: tags, quotes and ampersands."""
    (tmp_path / "images").mkdir()
    Image.new("RGB", (20, 10), (200, 30, 30)).save(tmp_path / "images" / 'x"><img src=y onerror=alert(2)>&amp;.png')
    Image.new("RGB", (20, 10), (30, 30, 200)).save(tmp_path / "images" / "plain.png")
    plain, bad = sorted((item.image_id for item in list_inputs([tmp_path / "images"])), key=len)
    assert "<" in bad and "&" in bad
    write_records(tmp_path / "captions.jsonl", [{"image_id": bad, "caption": HOSTILE_CAPTION, "split": "test"},
                                                {"image_id": plain, "caption": "a blue square", "split": "test"}])
    write_records(tmp_path / "rankings.jsonl", [
        {"query": bad, "direction": "i2t", "ids": [f"{plain}#0", f"{bad}#0"], "scores": [0.9, 0.4]},
        {"query": f"{bad}#0", "direction": "t2i", "ids": [bad, plain], "scores": [0.8, 0.1]}])
    write_records(tmp_path / "generated.jsonl", [{"image_id": bad, "caption": HOSTILE_CAPTION}])
    (tmp_path / "scores.json").write_text(json.dumps({HOSTILE_METRIC: 0.5}), encoding="utf-8")
    inputs = ReportInputs(rankings=[f"{tmp_path}/rankings.jsonl"], generated=[f"{tmp_path}/generated.jsonl"],
                          images=[f"{tmp_path}/images"], captions=f"{tmp_path}/captions.jsonl",
                          scores=[f"{tmp_path}/scores.json"])
    build_report(tmp_path / "site", inputs, title=HOSTILE_TITLE)
    return tmp_path / "site", bad, plain


def test_markup_in_ids_captions_titles_and_names_is_shown_as_text(hostile):
    """Ids and captions are input, not markup: the page holds only its own two scripts and no element they name,
    and every hostile string reads back, character for character, as text or as an attribute's value."""
    site, bad, plain = hostile
    page = read_page(site / "index.html")
    tags = [tag for tag, _ in page.elements]
    assert [attrs.get("src") for tag, attrs in page.elements if tag == "script"] == ["assets/report.js",
                                                                                      "data/summary.js"]
    assert "b" not in tags and "i" not in tags
    assert not any(key.startswith("on") for _, attrs in page.elements for key in attrs)
    images = [attrs for tag, attrs in page.elements if tag == "img"]
    assert all((site / attrs["src"]).is_file() for attrs in images)
    assert {attrs["alt"] for attrs in images} == {bad, plain}
    assert page.texts.count(HOSTILE_CAPTION) >= 3  # the i2t result, the t2i query, the generated caption
    assert HOSTILE_TITLE in page.texts and HOSTILE_METRIC in page.texts
    assert bad in page.texts and f"{bad}#0" in page.texts
