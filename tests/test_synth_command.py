import hashlib
import json

from click.testing import CliRunner

from vltools.cli import cli

SMALL = ["--images", "12", "--pairs", "10", "--aux-images", "10"]


def tree_digest(folder):
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def test_synth_writes_a_world_and_a_one_line_summary(tmp_path, vltools_cmd):
    result = vltools_cmd("synth", tmp_path / "w", "--seed", "5", *SMALL)
    assert result.returncode == 0, result.stderr
    assert result.stdout == b""
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert "12 images" in lines[0] and "60 captions" in lines[0] and "10 pairs" in lines[0]
    assert (tmp_path / "w" / "README.txt").exists()
    again = vltools_cmd("--quiet", "synth", tmp_path / "v", "--seed", "5", *SMALL)
    assert again.returncode == 0 and again.stderr == b""
    assert tree_digest(tmp_path / "w") == tree_digest(tmp_path / "v")


def test_inspect_reads_every_jsonl_file(tmp_path, vltools_cmd):
    assert vltools_cmd("synth", tmp_path / "w", *SMALL).returncode == 0
    files = sorted((tmp_path / "w").glob("*.jsonl"))
    result = vltools_cmd("inspect", "--json", *files)
    assert result.returncode == 0, result.stderr
    kinds = {json.loads(line)["path"].rsplit("/", 1)[1]: json.loads(line)["kind"]
             for line in result.stdout.decode().splitlines()}
    assert kinds == {"aux_captions.jsonl": "captions", "aux_images.jsonl": "images", "captions.jsonl": "captions",
                     "images.jsonl": "images", "pair_images.jsonl": "images", "pairs.jsonl": "pairs",
                     "regions.jsonl": "regions"}  # no user_study.jsonl: 12 images leave too few test images


def test_inspect_reads_the_user_study(tmp_path, vltools_cmd):
    assert vltools_cmd("synth", tmp_path / "w", "--images", "120", "--pairs", "0", "--aux-images", "0").returncode == 0
    result = vltools_cmd("inspect", "--json", tmp_path / "w" / "user_study.jsonl")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["kind"] == "votes" and summary["count"] > 0


def test_non_empty_output_folder_exits_1_with_one_line(tmp_path, vltools_cmd):
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "keep.txt").write_text("x")
    result = vltools_cmd("synth", tmp_path / "w", *SMALL)
    assert result.returncode == 1
    message = result.stderr.decode().strip()
    assert len(message.splitlines()) == 1 and "not empty" in message and str(tmp_path / "w") in message
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["keep.txt"]


def test_force_replaces_an_earlier_world(tmp_path):
    runner = CliRunner()
    first = runner.invoke(cli, ["synth", str(tmp_path / "w"), "--seed", "1", *SMALL])
    assert first.exit_code == 0, first.output
    before = tree_digest(tmp_path / "w")
    second = runner.invoke(cli, ["synth", str(tmp_path / "w"), "--seed", "2", "--force", *SMALL])
    assert second.exit_code == 0, second.output
    assert tree_digest(tmp_path / "w") != before


def test_bad_values_exit_1_and_usage_errors_exit_2(tmp_path, vltools_cmd):
    result = vltools_cmd("synth", tmp_path / "w", "--pairs", "3")
    assert result.returncode == 1 and b"--pairs 3" in result.stderr and not (tmp_path / "w").exists()
    result = vltools_cmd("synth", tmp_path / "w", "--images", "3")
    assert result.returncode == 2 and b"Invalid value for '--images'" in result.stderr
    assert vltools_cmd("synth", tmp_path / "w", "--images", "many").returncode == 2
    assert vltools_cmd("synth").returncode == 2
