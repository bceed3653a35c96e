"""vltools.stages.caption: the one function `vltools caption` and `vltools.caption` call, so that the Python API
refuses what the command refuses and writes and resumes as it does."""

from __future__ import annotations

import json

import pytest
from tiny_captioning import make_caption_world, mute_captioner, save_captioner

import vltools
import vltools.infer.caption as infer_caption
from vltools.errors import ArgumentError, VLToolsError


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    folder = tmp_path_factory.mktemp("captions")
    features, captions = make_caption_world(folder, n_images=12, n_val=4)
    return features, captions, save_captioner(folder / "aa.pt", "adaptive-attention", captions)


def test_the_api_refuses_all_empty_captions_as_the_command_does_and_writes_nothing(world, tmp_path):
    """`vltools.caption` returned and wrote 40 empty captions that `vltools caption` refused."""
    features, _, model = world
    mute = mute_captioner(model, tmp_path / "mute.pt")
    with pytest.raises(VLToolsError, match=r"mute.pt: all 12 captions it wrote are empty"):
        vltools.caption(mute, features, output=tmp_path / "caps.jsonl")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mute.pt"]


def test_the_api_resumes_an_interrupted_run_into_its_output(world, tmp_path, monkeypatch):
    features, _, model = world
    output = tmp_path / "caps.jsonl"
    real = infer_caption.caption_batches

    def stopped(*args, **kwargs):
        batches = real(*args, **kwargs)
        yield next(batches)
        raise KeyboardInterrupt

    monkeypatch.setattr(infer_caption, "caption_batches", stopped)   # the stage imports it when it runs
    with pytest.raises(KeyboardInterrupt):
        vltools.caption(model, features, output=output, batch_size=5)
    monkeypatch.undo()
    assert not output.exists() and (tmp_path / "caps.jsonl.partial" / "chunk-000000.jsonl").exists()
    with pytest.raises(VLToolsError, match="left by an interrupted run; continue it with resume=True"):
        vltools.caption(model, features, output=output)
    found = vltools.caption(model, features, output=output, resume=True)
    assert [json.loads(line) for line in output.read_text().splitlines()] == found == vltools.caption(model, features)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["caps.jsonl"]


def test_shards_and_standard_output_as_the_command(world, capsys):
    features, _, model = world
    whole = vltools.caption(model, features)
    shards = [vltools.caption(model, features, shard=f"{i}/2", batch_size=4) for i in range(2)]
    assert shards == [whole[:4], whole[4:]]      # of the 3 batches of 4, the first, then the other two
    capsys.readouterr()
    assert vltools.caption(model, features, output="-") == whole
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == whole


@pytest.mark.parametrize(("options", "message"), [
    ({"resume": True}, "resume needs output=OUT.jsonl"),
    ({"logp": True}, "logp needs captions"),
    ({"logp": True, "captions": "caps.jsonl"}, r"logp needs output=LOGP.h5"),
    ({"shard": "2/2"}, "shard"),
    ({"beam": 0}, "beam must be"),
    ({"checkpoint_seconds": -1}, "checkpoint_seconds must be"),
])
def test_bad_arguments_are_refused_in_pythons_words_before_any_work(world, tmp_path, options, message):
    features, _, model = world
    with pytest.raises(VLToolsError, match=message):
        vltools.caption(model, features, **options)
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_keyword_is_named(world):
    features, _, model = world
    with pytest.raises(ArgumentError, match="sampel"):
        vltools.caption(model, features, sampel=True)
