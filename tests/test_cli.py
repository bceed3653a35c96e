import errno
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest

from vltools import __version__
from vltools.cli import STAGES, cli, guard_outputs, main
from vltools.commands.options import is_output_param, output_option
from vltools.errors import VLToolsError


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


def _writing_stages() -> list[tuple[str, ...]]:
    """Every stage and subcommand that writes an output (has -o/--output or an OUT argument), by its path."""
    found = []

    def visit(command: click.Command, names: tuple[str, ...]) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                visit(sub, (*names, name))
        elif any(is_output_param(param) for param in command.params):
            found.append(names)

    for name in cli.list_commands(None):
        visit(cli.get_command(None, name), (name,))
    return found


def _argv(names: tuple[str, ...], tmp_path, out) -> list[str]:
    """Arguments that get past click's checks to the stage (dummy existing inputs, first choices), output `out`."""
    command = cli
    for name in names:
        command = command.get_command(None, name) if isinstance(command, click.Group) else command.commands[name]
    dummy_file, dummy_dir = tmp_path / "in" / "dummy.txt", tmp_path / "in" / "dir"
    dummy_dir.mkdir(parents=True, exist_ok=True)
    dummy_file.write_text("x\n")
    argv: list[str] = list(names)

    def value(param: click.Parameter) -> str:
        if is_output_param(param):
            return str(out)
        if isinstance(param.type, click.Choice):
            return str(param.type.choices[0])
        if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
            return "1"
        if isinstance(param.type, click.Path) and not param.type.file_okay:
            return str(dummy_dir)
        return str(dummy_file)

    for param in command.params:
        if isinstance(param, click.Argument) and (param.required or is_output_param(param)):
            argv.append(value(param))
        elif isinstance(param, click.Option) and (param.required or is_output_param(param)):
            argv += [param.opts[0], value(param)]
    return argv


def _run_in_process(argv: list[str]) -> int:
    try:
        main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
        if code == 2:  # a stage whose own option checks refuse the dummy arguments: teach _argv its needs
            pytest.skip(f"dummy arguments are a usage error for {' '.join(argv[:2])}")
        return code
    return 0


WRITING_STAGES = _writing_stages()


def test_every_writing_stage_is_found():
    assert {"synth", "extract-regions", "segment-pool", "merge", "train", "encode", "match"} <= \
        {names[0] for names in WRITING_STAGES}
    assert {("score", "caption"), ("score", "semantic")} <= set(WRITING_STAGES)


@pytest.mark.parametrize(("names", "option"), [(("match",), "--sims"), (("score", "caption"), "--per-image"),
                                               (("score", "semantic"), "--plot")], ids=" ".join)
def test_extra_outputs_are_locked_and_their_folder_checked_before_work(names, option, tmp_path, capsys):
    """An output given by another option than -o (alone in a missing folder, or written by another live
    process) is refused at start like -o."""
    argv = _argv(names, tmp_path, tmp_path / "out")
    missing = tmp_path / "no" / "extra"
    argv[argv.index(option) + 1] = str(missing)
    assert _run_in_process(argv) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"vltools: error: {missing}: the folder {missing.parent} does not exist; create it first"]
    extra = tmp_path / "extra"
    other = {"pid": os.getppid(), "host": socket.gethostname(), "command": "vltools match --sims extra"}
    Path(f"{extra}.lock").write_text(json.dumps(other))
    argv[argv.index(option) + 1] = str(extra)
    assert _run_in_process(argv) == 1
    assert f"{extra}: another process is writing it (pid {os.getppid()} on " in capsys.readouterr().err


def test_an_option_declared_with_output_option_is_an_output(tmp_path, capsys):
    ran = []

    @click.command()
    @output_option("--report", "report_path", type=click.Path(dir_okay=False))
    def command(report_path):
        ran.append(report_path)

    assert is_output_param(command.params[0]) and not is_output_param("report_path")
    missing = tmp_path / "no" / "report.html"
    with pytest.raises(VLToolsError, match=f"{missing}: the folder {missing.parent} does not exist"):
        guard_outputs(command).main(["--report", str(missing)], standalone_mode=False)
    assert ran == []


@pytest.mark.parametrize("names", WRITING_STAGES, ids=" ".join)
def test_every_writing_stage_refuses_a_read_only_folder_in_one_line(names, tmp_path, capsys, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere: make the OS refuse files in the folder as a read-only one would
        real_open = os.open

        def refusing_open(path, flags, *args):
            if str(path).startswith(str(folder)) and flags & os.O_CREAT:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(path, flags, *args)

        monkeypatch.setattr(os, "open", refusing_open)
    out = folder / "out"
    assert _run_in_process(_argv(names, tmp_path, out)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"vltools: error: {out}: cannot write (Permission denied)")
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("names", WRITING_STAGES, ids=" ".join)
def test_every_writing_stage_stops_at_another_live_writer_and_refuses_a_missing_folder(names, tmp_path, capsys):
    out = tmp_path / "out"
    other = {"pid": os.getppid(), "host": socket.gethostname(), "command": "vltools train -o out"}
    Path(f"{out}.lock").write_text(json.dumps(other))
    assert _run_in_process(_argv(names, tmp_path, out)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{out}: another process is writing it (pid {os.getppid()} on " in lines[0]
    assert not out.exists() and json.loads(Path(f"{out}.lock").read_text()) == other
    missing = tmp_path / "no" / "out"
    assert _run_in_process(_argv(names, tmp_path, missing)) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"vltools: error: {missing}: the folder {missing.parent} does not exist; create it first"]
    assert not missing.parent.exists()


def test_a_full_disk_on_standard_output_is_one_line(tmp_path):
    vocab = Path(__file__).parent / "data" / "convert" / "scan_vocab" / "f30k_precomp_vocab.json"
    with open("/dev/full", "w") as full:
        result = subprocess.run([sys.executable, "-m", "vltools", "convert", "scan-vocab", str(vocab)], stdout=full,
                                stderr=subprocess.PIPE, timeout=300)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "vltools: error: standard output: cannot write (No space left on device); check that its folder is "
        "writable and has free space"]


def test_sigterm_leaves_nothing(tmp_path):
    out = tmp_path / "world"
    process = subprocess.Popen([sys.executable, "-m", "vltools", "synth", str(out), "--images", "3000"],
                               stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".world.tmp-*/images/*.png")) and process.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    process.terminate()
    assert process.wait() == 143
    assert process.stderr.read().decode().splitlines() == ["vltools: terminated"]
    process.stderr.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("names", [("caption",), ("concept-scores",), ("extract-regions",)], ids=" ".join)
def test_a_shard_out_of_range_is_a_usage_error(names, tmp_path, capsys):
    argv = [*_argv(names, tmp_path, tmp_path / "out"), "--shard", "3/2"]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert "Invalid value for '--shard': need 0 <= i < n" in capsys.readouterr().err
