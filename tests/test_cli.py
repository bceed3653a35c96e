import json

import click

from vltools import __version__
from vltools.cli import STAGES, cli


def test_help_lists_every_stage_and_each_stage_loads(vltools_cmd):
    result = vltools_cmd("--help")
    assert result.returncode == 0
    listed = result.stdout.decode()
    for name in STAGES:
        assert f"  {name} " in listed
        assert isinstance(cli.get_command(None, name), click.Command)


def test_version(vltools_cmd):
    assert vltools_cmd("--version").stdout.decode().strip().endswith(__version__)


def test_usage_error_exits_2(vltools_cmd):
    result = vltools_cmd("inspect")
    assert result.returncode == 2
    assert b"Missing argument" in result.stderr


def test_broken_line_7_names_line_7_and_exits_1(tmp_path, vltools_cmd):
    lines = [json.dumps({"image_id": str(i), "caption": f"caption {i}", "split": "train"}) for i in range(10)]
    lines[6] = '{"image_id": "6", "caption": '
    (tmp_path / "caps.jsonl").write_text("\n".join(lines) + "\n")
    result = vltools_cmd("inspect", tmp_path / "caps.jsonl")
    assert result.returncode == 1
    err = result.stderr.decode().strip().splitlines()
    assert len(err) == 1
    assert "caps.jsonl: line 7: malformed JSON" in err[0]
    assert b"Traceback" not in result.stderr


def test_debug_shows_traceback(tmp_path, vltools_cmd):
    (tmp_path / "caps.jsonl").write_text("{broken\n")
    result = vltools_cmd("--debug", "inspect", tmp_path / "caps.jsonl")
    assert result.returncode == 1
    assert b"Traceback" in result.stderr


def test_inspect_json_output(tmp_path, vltools_cmd):
    (tmp_path / "caps.jsonl").write_text(json.dumps({"image_id": "a", "caption": "x"}) + "\n")
    result = vltools_cmd("inspect", "--json", tmp_path / "caps.jsonl")
    assert result.returncode == 0
    assert json.loads(result.stdout)["kind"] == "captions"
