"""vltools.stages.match: the one function `vltools match` and `vltools.match` call, so that the Python API writes
the rankings and the matrix, and resumes, as the command does."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matching_helpers import make_world, save_tiny

import vltools
import vltools.infer.match as match_step
from vltools.cli import cli
from vltools.errors import VLToolsError
from vltools.io.sims import read_sims


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("stage")
    features, captions = make_world(folder, n_images=6, per_image=3)
    return features, captions, save_tiny(folder / "sgr.pt", "sgr")


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_api_writes_what_the_command_writes(world, tmp_path):
    features, captions, sgr = world
    result = CliRunner().invoke(cli, ["-q", "match", "--model", str(sgr), str(features), str(captions), "-o",
                                      str(tmp_path / "cli.jsonl"), "--sims", str(tmp_path / "cli.h5")])
    assert result.exit_code == 0, result.output
    found = vltools.match(features, captions, sgr, output=tmp_path / "api.jsonl", sims=tmp_path / "api.h5")
    assert _lines(tmp_path / "api.jsonl") == _lines(tmp_path / "cli.jsonl") == found.rankings()
    np.testing.assert_array_equal(read_sims(tmp_path / "api.h5").sims, read_sims(tmp_path / "cli.h5").sims)
    np.testing.assert_array_equal(found.sims, read_sims(tmp_path / "api.h5").sims)
    lean = vltools.match(features, captions, sgr, output=tmp_path / "lean.jsonl")
    assert lean.sims is None and lean.rankings() == found.rankings()    # only the rankings: no matrix kept


def test_the_api_resumes_an_interrupted_match(world, tmp_path, monkeypatch):
    features, captions, sgr = world
    output = tmp_path / "r.jsonl"
    real = match_step.similarity_columns

    def stopped(*given, **options):
        yield next(real(*given, **options))
        raise KeyboardInterrupt

    monkeypatch.setattr(match_step, "similarity_columns", stopped)
    with pytest.raises(KeyboardInterrupt):
        vltools.match(features, captions, sgr, output=output, block_captions=4)
    monkeypatch.undo()
    assert not output.exists() and (tmp_path / "r.jsonl.partial" / "state.json").exists()
    resumed = vltools.match(features, captions, sgr, output=output, block_captions=4, resume=True)
    assert _lines(output) == resumed.rankings() == vltools.match(features, captions, sgr, block_captions=4).rankings()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


def test_one_path_named_as_two_outputs_is_refused_before_any_work(world, tmp_path):
    features, captions, sgr = world
    same = tmp_path / "x"
    with pytest.raises(VLToolsError, match="this run writes it twice"):
        vltools.match(features, captions, sgr, output=same, sims=same)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_second_input_and_a_resume_without_output_are_refused_in_pythons_words(world):
    features, captions, sgr = world
    with pytest.raises(VLToolsError, match=r"^second is missing \(only index_file searches one input, and a "
                                           r"similarity matrix is ranked alone\)"):
        vltools.match(features, model=sgr)
    with pytest.raises(VLToolsError, match="--resume needs -o PATH"):
        vltools.match(features, captions, sgr, resume=True)
