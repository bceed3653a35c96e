"""`vltools convert birds-to-words` on a TSV built from the real sample pair of the dataset's README."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from convert_cli import DATA, convert

from vltools.cli import main
from vltools.data.converters.birds_to_words import COLUMNS, read_birds_to_words
from vltools.errors import VLToolsError

README = DATA / "birds_to_words" / "README.md"
# the README's sample pair is iNaturalist photos 647514 (left) and 5595152 (right), image URLs in iNaturalist's
# photos/<id>/medium.jpg form; the README gives neither observation URLs nor species, so those are placeholders
LEFT = ("https://www.inaturalist.org/observations/left-placeholder",
        "https://static.inaturalist.org/photos/647514/medium.jpg")
RIGHT = ("https://www.inaturalist.org/observations/right-placeholder",
         "https://static.inaturalist.org/photos/5595152/medium.jpg")


def descriptions() -> list[str]:
    """The four comparative descriptions numbered 1. to 4. in the README."""
    found = re.findall(r"^\d\. (.+)$", README.read_text(encoding="utf-8"), flags=re.M)
    assert len(found) == 4
    return found


def build_tsv(path, header: bool = True) -> None:
    rows = [list(COLUMNS)] if header else []
    for number, text in enumerate(descriptions(), 1):
        rows.append([LEFT[0], LEFT[1], "species-left-placeholder", "base",
                     RIGHT[0], RIGHT[1], "species-right-placeholder", "visual", "test", str(number), text])
    path.write_text("".join("\t".join(row) + "\n" for row in rows), encoding="utf-8")


@pytest.mark.parametrize("header", [True, False])
def test_sample_pair_gives_four_pair_records(tmp_path, header):
    tsv, out = tmp_path / "birds.tsv", tmp_path / "pairs.jsonl"
    build_tsv(tsv, header)
    convert("birds-to-words", tsv, "-o", out)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    pair = hashlib.sha1(f"{LEFT[1]}\t{RIGHT[1]}".encode()).hexdigest()[:16]
    assert records == [{"pair_id": pair, "image_a": "photos/647514/medium.jpg", "image_b": "photos/5595152/medium.jpg",
                        "description": text, "split": "test"} for text in descriptions()]


def test_url_names_and_basename_collision(tmp_path):
    tsv = tmp_path / "birds.tsv"
    build_tsv(tsv)
    assert read_birds_to_words(tsv, image_names="url")[0]["image_a"] == LEFT[1]
    with pytest.raises(VLToolsError, match=r"line 2: image name 'medium.jpg' is shared by .*image_names=path or url"):
        read_birds_to_words(tsv, image_names="basename")


def test_row_with_ten_columns_exits_1_naming_the_line(tmp_path, vltools_cmd):
    tsv = tmp_path / "birds.tsv"
    build_tsv(tsv)
    lines = tsv.read_text().splitlines()
    lines[3] = lines[3].rsplit("\t", 1)[0]
    tsv.write_text("\n".join(lines) + "\n")
    result = vltools_cmd("convert", "birds-to-words", tsv, "-o", tmp_path / "pairs.jsonl")
    assert result.returncode == 1
    assert "birds.tsv: line 4: 10 columns instead of 11" in result.stderr.decode()
    assert not (tmp_path / "pairs.jsonl").exists()


def test_quotes_are_text_and_an_unclosed_one_swallows_no_row(tmp_path):
    """csv quoting once stripped a leading quote and let an unclosed one swallow the next row (4 in, 3 out)."""
    tsv, out = tmp_path / "birds.tsv", tmp_path / "pairs.jsonl"
    build_tsv(tsv)
    lines = tsv.read_text(encoding="utf-8").splitlines()
    texts = ['"quoted" at the start', 'an "unclosed quote', "plain", 'ends with a quote"']
    for number, text in enumerate(texts, 1):
        lines[number] = lines[number].rsplit("\t", 1)[0] + "\t" + text
    tsv.write_text("\n".join(lines) + "\n", encoding="utf-8")
    convert("birds-to-words", tsv, "-o", out)
    assert [json.loads(line)["description"] for line in out.read_text(encoding="utf-8").splitlines()] == texts


def test_an_image_url_with_a_control_character_is_refused_naming_the_line(tmp_path, capsys):
    tsv, out = tmp_path / "birds.tsv", tmp_path / "pairs.jsonl"
    build_tsv(tsv)
    tsv.write_text(tsv.read_text(encoding="utf-8").replace("647514/medium", "647514\x1b/medium", 1), encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["convert", "birds-to-words", str(tsv), "--image-names", "url", "-o", str(out)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 1 and err.count("\n") == 1
    assert "birds.tsv: line 2: field 'image_a' holds the control character '\\x1b'" in err and not out.exists()
