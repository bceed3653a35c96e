"""`vltools caption-kernel` on a small captions file and user-study triplets: its rankings scored by
`score semantic --triplets`, and bad input (an image without captions, an empty triplets file, a truncated JSONL)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from matching_helpers import fails

from vltools.cli import cli
from vltools.io.records import read_records

CAPTIONS = [("q", "a brown dog runs on the green grass"), ("q", "a red ball"),
            ("same", "a brown dog runs on the grass"), ("same", "a small red ball"),
            ("other", "two cars parked in a street"), ("other", "a tall building")]
# the model prefers `same` to `other` for the query q: 3 of 5 annotators agree in the first triplet, 4 of 4 in the
# second (a and b swapped), so the agreement is (3 / 5 + 4 / 4) / 2 = 80 percent
TRIPLETS = [{"query": "q", "a": "same", "b": "other", "o1": 3, "o2": 1, "o3": 1},
            {"query": "q", "a": "other", "b": "same", "o1": 0, "o2": 4, "o3": 0}]


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def files(tmp_path):
    captions = write_jsonl(tmp_path / "caps.jsonl", [{"image_id": i, "caption": c} for i, c in CAPTIONS])
    return captions, write_jsonl(tmp_path / "triplets.jsonl", TRIPLETS)


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, ["--quiet", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_rankings_of_the_triplet_images_scored_for_user_agreement(files, tmp_path):
    captions, triplets = files
    out = tmp_path / "kernel.jsonl"
    run("caption-kernel", captions, "--pairs", triplets, "-o", str(out))
    (record,) = read_records(out, "rankings")
    assert (record["query"], record["direction"], record["ids"]) == ("q", "i2i", ["same", "other"])
    assert 0 < record["scores"][1] < record["scores"][0] < 1
    result = json.loads(run("score", "semantic", str(out), "--triplets", triplets))
    assert result == {"user_agreement": pytest.approx(80.0), "n_triplets": 2}


def test_an_image_without_captions_is_named(files, tmp_path, capsys):
    captions, _ = files
    triplets = write_jsonl(tmp_path / "t.jsonl", [{**TRIPLETS[0], "b": "absent"}])
    out = tmp_path / "kernel.jsonl"
    err = fails(capsys, "caption-kernel", captions, "--pairs", triplets, "-o", str(out))
    assert err == (f"vltools: error: {captions}: 1 images of the pairs have no caption: 'absent'; give the captions "
                   "of every image the pairs name (K needs at least one caption per image)\n")
    assert not out.exists()


def test_empty_pairs_and_truncated_captions_are_one_line_errors(files, tmp_path, capsys):
    captions, triplets = files
    out = tmp_path / "kernel.jsonl"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    err = fails(capsys, "caption-kernel", captions, "--pairs", str(empty), "-o", str(out))
    assert err == f"vltools: error: {empty}: empty file: no votes records; give a JSONL file with one votes record " \
                  "per line\n"
    truncated = tmp_path / "truncated.jsonl"
    truncated.write_text(open(captions).read()[:-20])
    err = fails(capsys, "caption-kernel", str(truncated), "--pairs", triplets, "-o", str(out))
    assert err.startswith(f"vltools: error: {truncated}: line 6: malformed JSON") and err.count("\n") == 1
    assert list(tmp_path.glob("kernel*")) == []
