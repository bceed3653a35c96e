import argparse
import contextlib
import errno
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
import torch
from click.testing import CliRunner
from pipeline_fixtures import run_process

from vltools import __version__
from vltools.cli import STAGES, cli, guard_outputs, main
from vltools.commands.inputs import InputFile
from vltools.commands.options import PrimaryOutput, is_output_param, output_option
from vltools.errors import VLToolsError
from vltools.io.kinds import HDF5_SIGNATURE


def test_help_lists_every_stage_and_each_stage_loads(vltools_cmd):
    result = vltools_cmd("--help")
    assert result.returncode == 0
    listed = result.stdout.decode()
    for name in STAGES:
        assert f"  {name} " in listed
        assert isinstance(cli.get_command(None, name), click.Command)


# Renders `vltools --help`, every `vltools STAGE --help` and every `vltools GROUP SUB --help` in one fresh
# interpreter, then prints what was shown and which of the heavy libraries got loaded.
EVERY_HELP = """
import contextlib, io, json, sys
from vltools.cli import STAGES, cli, main
shown = []
with contextlib.redirect_stdout(io.StringIO()) as out:
    main(["--help"])
    for name in STAGES:
        main([name, "--help"])
        shown.append(name)
        for sub in getattr(cli.get_command(None, name), "commands", {}):
            main([name, sub, "--help"])
            shown.append(name + " " + sub)
print(json.dumps({"shown": shown, "usages": out.getvalue().count("Usage: vltools"),
                  "loaded": sorted(m for m in ("torch", "torchvision", "gensim") if m in sys.modules)}))
"""


def test_no_help_loads_torch():
    """`vltools --help` and every stage's and subcommand's --help once took 2.5-3.5 s on 2 cores, importing torch
    through the shared options and each stage's library; a stage now loads torch only when it runs (and gensim,
    which tfidf-proxy's word2vec-fv trains with, likewise)."""
    result = subprocess.run([sys.executable, "-c", EVERY_HELP], capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert {"extract-regions", "train", "match", "caption", "score caption", "convert karpathy",
            "models list"} <= set(report["shown"])
    assert report["usages"] == len(report["shown"]) + 1
    assert report["loaded"] == []


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


def test_inspect_names_a_file_of_no_vltools_kind_by_what_it_is(tmp_path, capsys):
    """A Flickr token file given to inspect was 'line 1: malformed JSON ...; fix or remove that line'."""
    (tmp_path / "tokens.txt").write_text("a.jpg#0\tA dog runs .\n")
    assert _exit_status(["inspect", str(tmp_path / "tokens.txt")]) == 1
    assert capsys.readouterr().err == (f"vltools: error: {tmp_path / 'tokens.txt'}: FILES must be HDF5 or a torch "
                                       "checkpoint or JSON lines, but this is a Flickr token file (IMAGE#N, a tab, "
                                       "a caption), which `vltools convert flickr` turns into captions JSON lines; "
                                       "see `vltools inspect --help`\n")


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
        if isinstance(param.type, InputFile):    # an input of the kind it takes (by its first bytes, all that is read)
            kind = param.type.kinds[0]
            dummy = tmp_path / "in" / f"dummy.{kind}"
            dummy.write_bytes(DUMMY_BYTES.get(kind, b"{}\n"))
            return str(dummy)
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


DUMMY_BYTES = {"hdf5": HDF5_SIGNATURE, "checkpoint": b"PK\x03\x04", "npy": b"\x93NUMPY"}


def _exit_status(argv: list[str]) -> int:
    """Run the CLI in this process; return its exit status."""
    try:
        main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def _run_in_process(argv: list[str]) -> int:
    code = _exit_status(argv)
    if code == 2:  # a stage whose own option checks refuse the dummy arguments: teach _argv its needs
        pytest.skip(f"dummy arguments are a usage error for {' '.join(argv[:2])}")
    return code


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
        result = run_process([sys.executable, "-m", "vltools", "convert", "scan-vocab", str(vocab)], stdout=full,
                             stderr=subprocess.PIPE)
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


def _binary_outputs() -> list[tuple[tuple[str, ...], str, str]]:
    """Every (stage path, output parameter, its option) declared binary: what a terminal on stdout must refuse."""
    found = []
    for names in WRITING_STAGES:
        command = cli
        for name in names:
            command = command.get_command(None, name) if isinstance(command, click.Group) else command.commands[name]
        found += [(names, param.name, param.opts[0]) for param in command.params
                  if getattr(param, "binary", None) is not None]
    return found


BINARY_OUTPUTS = _binary_outputs()


def test_every_stage_writing_hdf5_declares_it():
    stages = {names for names, _, _ in BINARY_OUTPUTS}
    assert {("extract-regions",), ("segment-pool",), ("concept-scores",), ("merge",), ("encode",), ("tfidf-proxy",),
            ("caption",), ("match",), ("index",), ("convert", "precomp"), ("convert", "bottom-up")} == stages


@pytest.mark.parametrize(("names", "name", "option"), BINARY_OUTPUTS,
                         ids=lambda v: " ".join(v) if isinstance(v, tuple) else v)
def test_binary_output_for_a_terminal_is_refused_before_any_work(names, name, option, tmp_path, capsys,
                                                                 monkeypatch):
    """The check runs when the stage starts: the dummy inputs (which the stage would reject) are never read."""
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    argv = _argv(names, tmp_path, tmp_path / "out")
    if name == "output":
        index = argv.index(str(tmp_path / "out"))
        del argv[index - 1:index + 1]  # -o left out: standard output
    else:
        argv += [option, "-"]
    if names == ("caption",):
        argv.append("--logp")  # caption writes HDF5 only with --logp
    assert _run_in_process(argv) == 1
    assert capsys.readouterr().err.splitlines() == [
        "vltools: error: refusing to write HDF5 to a terminal; give -o PATH or redirect standard output"]


def test_the_terminal_is_refused_through_a_real_pty_before_the_images_are_listed(tmp_path):
    import pty

    (tmp_path / "imgs").mkdir()  # no images: listing them would be the stage's first error
    leader, follower = pty.openpty()
    try:
        result = run_process([sys.executable, "-m", "vltools", "extract-regions", str(tmp_path / "imgs")],
                             stdout=follower, stderr=subprocess.PIPE)
    finally:
        os.close(follower)
        os.close(leader)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "vltools: error: refusing to write HDF5 to a terminal; give -o PATH or redirect standard output"]


def test_a_failed_run_names_the_empty_file_the_shell_redirected_to_and_never_deletes_it(tmp_path):
    (tmp_path / "caps.jsonl").write_text("{broken\n")
    result = run_process(f"{sys.executable} -m vltools inspect caps.jsonl > out.txt", shell=True, cwd=tmp_path,
                         stderr=subprocess.PIPE)
    assert result.returncode == 1 and (tmp_path / "out.txt").read_text() == ""
    assert result.stderr.decode().strip().endswith(
        f"; {tmp_path / 'out.txt'} (standard output) was left empty: delete it, or write with -o PATH, which "
        "leaves no file")


@pytest.mark.parametrize("script", [
    "{ vltools inspect caps.jsonl; echo IMPORTANT; } > log.txt",
    "exec > log.txt; vltools inspect caps.jsonl; echo IMPORTANT",
])
def test_a_failed_stage_keeps_the_file_the_shell_shares_with_what_runs_after_it(script, tmp_path):
    (tmp_path / "caps.jsonl").write_text("{broken\n")
    vltools = f"{shlex.quote(sys.executable)} -m vltools"
    result = run_process(script.replace("vltools", vltools), shell=True, cwd=tmp_path, stderr=subprocess.PIPE)
    assert result.returncode == 0, result.stderr     # the script's last command, echo
    assert (tmp_path / "log.txt").read_text() == "IMPORTANT\n"


# stages whose primary output is a file or folder (or cannot be told), failing as a user types them; standard
# output only took their messages
WRITING_ELSEWHERE = {
    "report": "report site --rankings broken.jsonl",
    "caption -o": "caption --model nt.pt feats.h5 --temperature nan -o c.jsonl",
    "match -o": "match --model missing.pt feats.h5 broken.jsonl -o ranks.jsonl",
    "an unknown option": "match --model missing.pt --bogus -o ranks.jsonl feats.h5 broken.jsonl",  # -o unreadable
    "an unknown stage": "extract-region photos",
    # no _ims.npy and no --captions-per-image: convert precomp wrote only the files its options name, and once
    # deleted the log (its parameters were none of the names _writes_stdout guessed from)
    "convert precomp": "convert precomp . --split test --captions c.jsonl",
    "train without -o": "train --model vse feats.h5 broken.jsonl",    # a usage error: -o is required
    "models add": "models add m missing.pt",
}


def _shell(tmp_path: Path, command: str) -> subprocess.CompletedProcess:
    (tmp_path / "broken.jsonl").write_text("{broken\n")
    (tmp_path / "feats.h5").write_bytes(b"")
    return run_process(f"{shlex.quote(sys.executable)} -m vltools {command}", shell=True, cwd=tmp_path,
                       capture_output=True)


@pytest.mark.parametrize("stage", WRITING_ELSEWHERE)
def test_a_failed_stage_writing_elsewhere_keeps_the_log_that_took_standard_output_and_error(stage, tmp_path):
    result = _shell(tmp_path, f"{WRITING_ELSEWHERE[stage]} > log.txt 2>&1")
    assert result.returncode in (1, 2)
    log = (tmp_path / "log.txt").read_text()
    assert re.search(r"^(vltools: error: |Error: )", log, re.MULTILINE), log
    assert "left empty" not in log


@pytest.mark.parametrize("stage", WRITING_ELSEWHERE)
def test_a_failed_stage_writing_elsewhere_keeps_the_empty_file_standard_output_went_to(stage, tmp_path):
    result = _shell(tmp_path, f"{WRITING_ELSEWHERE[stage]} > log.txt 2> err.txt")
    assert result.returncode in (1, 2)
    assert (tmp_path / "log.txt").read_text() == ""
    errors = (tmp_path / "err.txt").read_text()
    assert re.search(r"^(vltools: error: |Error: )", errors, re.MULTILINE), errors
    assert "log.txt" not in errors


def _leaf_stages() -> list[tuple[tuple[str, ...], click.Command]]:
    found = []

    def walk(names: tuple[str, ...], command: click.Command) -> None:
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk((*names, name), sub)
        else:
            found.append((names, command))

    for stage in STAGES:
        walk((stage,), cli.get_command(None, stage))
    return found


def test_every_stage_declares_where_its_primary_output_goes():
    """Declared, not guessed from parameter names: a standard output left empty by a failed run is named only
    for a stage whose primary output goes there (PrimaryOutput.stdout), without -o or with -o -."""
    for names, command in _leaf_stages():
        primary = getattr(command, "primary_output", None)
        assert isinstance(primary, PrimaryOutput), names
        params = {param.name: param for param in command.params}
        assert primary.param is None or primary.param in params, names
        if primary.stdout and primary.param is not None:     # left out, it is standard output
            assert not params[primary.param].required, names
    declared = {" ".join(names): command.primary_output for names, command in _leaf_stages()}
    assert declared["inspect"] == PrimaryOutput(None, stdout=True)
    assert declared["convert precomp"] == PrimaryOutput(None, stdout=False)
    assert declared["match"] == PrimaryOutput("output", stdout=True, locks=False)   # its stage function locks
    assert declared["train"] == PrimaryOutput("output", stdout=False)


def test_a_failed_stage_writing_hdf5_to_standard_output_keeps_the_file_the_shell_made_and_names_it(tmp_path):
    (tmp_path / "photos").mkdir()   # no images: the run fails before any work
    result = _shell(tmp_path, "extract-regions photos > feats.h5 2> err.txt")
    assert result.returncode == 1 and (tmp_path / "feats.h5").read_bytes() == b""
    assert f"; {tmp_path / 'feats.h5'} (standard output) was left empty" in (tmp_path / "err.txt").read_text()


def test_a_failed_stage_keeps_the_file_when_standard_error_goes_there_too(tmp_path):
    (tmp_path / "photos").mkdir()
    result = _shell(tmp_path, "extract-regions photos > feats.h5 2>&1")
    assert result.returncode == 1
    assert (tmp_path / "feats.h5").read_text().startswith("vltools: error: ")


def test_a_closed_pipe_exits_0_quietly_as_head_expects(tmp_path):
    coco = {"images": [{"id": i, "file_name": f"{i}.jpg"} for i in range(2000)],
            "annotations": [{"image_id": i // 5, "id": i, "caption": f"caption {i} " * 20} for i in range(10000)]}
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    result = run_process(["bash", "-c", f"set -o pipefail; {sys.executable} -m vltools convert coco coco.json | "
                                        "head -1"], cwd=tmp_path, capture_output=True)
    assert result.returncode == 0 and result.stderr == b""
    assert json.loads(result.stdout)["image_id"] == "0"


def _help(*names: str) -> str:
    result = CliRunner().invoke(cli, [*names, "--help"], terminal_width=120)
    assert result.exit_code == 0, result.output
    return result.output


def test_top_level_help_lists_every_trainable_model():
    from vltools.training import TASKS

    listed = " ".join(_help().split())
    assert all(f"{name}," in listed or f"{name})" in listed for name in TASKS)


def test_help_texts_point_only_to_files_the_source_distribution_has():
    """Paths such as bin/fetch_sgraf_models.sh or examples/sgraf/configs/ in any help or error text exist, and
    MANIFEST.in ships their top folders in the sdist."""
    root = Path(__file__).parent.parent
    manifest = (root / "MANIFEST.in").read_text()
    texts = [_help(name) for name in STAGES] + [path.read_text() for path in (root / "vltools").rglob("*.py")]
    found = {match for text in texts for match in re.findall(r"\b((?:bin|examples)/[\w./-]*\w)", text)}
    assert "bin/fetch_sgraf_models.sh" in found and "examples/sgraf/configs" in found
    for path in found:
        assert list(root.glob(path)), path
        assert f"graft {path.split('/')[0]}" in manifest


def assert_runs_as_printed(text: str) -> None:
    """`vltools STAGE [SUB] ...` names only options its command has and gives every parameter it requires."""
    words = shlex.split(text)
    command, rest = cli.get_command(None, words[1]), words[2:]
    if isinstance(command, click.Group):
        command, rest = command.commands[rest[0]], rest[1:]
    values, _, _ = command.make_parser(click.Context(command, info_name=words[1])).parse_args(rest)
    assert [param.name for param in command.params if param.required and param.name not in values] == [], text


def test_the_commands_an_error_names_run_as_printed(tmp_path, capsys):
    """Hints once named commands without what they need: `convert sgraf-checkpoint --trust` (no CKPT, --vocab or
    -o), "rank images for images with vltools match first" (which files?)."""
    pickled = tmp_path / "model_best.pth.tar"
    torch.save({"opt": argparse.Namespace(lr=0.1)}, pickled)
    rankings = tmp_path / "t2i.jsonl"
    rankings.write_text(json.dumps({"query": "a#0", "direction": "t2i", "ids": ["a"], "scores": [1.0]}) + "\n")
    captions = tmp_path / "c.jsonl"
    captions.write_text(json.dumps({"image_id": "a", "caption": "a cat"}) + "\n")
    for argv in (["encode", str(captions), "--model", str(pickled)],
                 ["explain", str(rankings), "--model", str(pickled), "--images", str(tmp_path), "-o", "out"]):
        with pytest.raises(SystemExit):
            main(argv)
        err = capsys.readouterr().err
        commands = re.findall(r"`(vltools [^`]+)`", err)
        assert commands, err
        for command in commands:
            assert_runs_as_printed(command)


def test_report_help_points_to_the_stage_that_writes_heatmaps():
    text = " ".join(_help("report").split())
    assert "match --explain" not in text and "(vltools explain -o FOLDER)" in text


def test_the_sigterm_handler_is_installed_for_the_call_only(tmp_path, capsys):
    """The handler once stayed installed after an in-process call, so the test process ignored a plain kill."""

    def mine(signum, frame):
        raise AssertionError("not called")

    seen = []
    original = signal.signal(signal.SIGTERM, mine)
    try:
        for argv in (["--version"], ["inspect", str(tmp_path / "absent.h5")]):
            with contextlib.suppress(SystemExit):
                main(argv)
            seen.append(signal.getsignal(signal.SIGTERM))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        with contextlib.suppress(SystemExit):
            main(["--version"])
        seen.append(signal.getsignal(signal.SIGTERM))
    finally:
        signal.signal(signal.SIGTERM, original)
    assert seen == [mine, mine, signal.SIG_DFL]
    assert "absent.h5: no such file" in capsys.readouterr().err


@pytest.mark.parametrize(("typed", "meant"), [("extrac-regions", "extract-regions"), ("mach", "match"),
                                              ("exrtact-regions", "extract-regions"), ("inspec", "inspect")])
def test_a_mistyped_stage_name_is_a_usage_error_naming_the_nearest_stage(typed, meant, capsys):
    assert _exit_status([typed, "feats.h5"]) == 2
    assert f"Error: No such command '{typed}'; did you mean '{meant}'?" in capsys.readouterr().err


def test_a_stage_name_near_none_is_refused_without_a_guess(capsys):
    assert _exit_status(["frobnicate"]) == 2
    err = capsys.readouterr().err
    assert "No such command 'frobnicate'" in err and "did you mean" not in err.lower()


@pytest.mark.parametrize("option", ["--quiet", "-q", "--debug"])
def test_a_vltools_option_after_the_stage_name_says_to_put_it_first(option, tmp_path, capsys):
    assert _exit_status(["inspect", str(tmp_path), option]) == 2
    assert (f"Error: {option} is an option of vltools itself, not of inspect: put it before the stage name "
            f"(vltools {option} inspect ...)") in capsys.readouterr().err


def test_a_vltools_option_after_a_subcommand_names_the_whole_stage(capsys):
    assert _exit_status(["models", "list", "--quiet"]) == 2
    assert "put it before the stage name (vltools --quiet models list ...)" in capsys.readouterr().err


def test_a_stage_option_unknown_to_vltools_too_keeps_clicks_error(capsys):
    assert _exit_status(["inspect", "--quite", "x"]) == 2
    err = capsys.readouterr().err
    assert "No such option" in err and "--quite" in err and "option of vltools itself" not in err


def test_a_plain_run_beside_an_interrupted_run_is_refused_before_torch_loads(tmp_path):
    """It loaded torch and the models (7-11 s) before the checkpoint said so."""
    (tmp_path / "photos").mkdir()
    shutil.copyfile(Path(__file__).parent / "data" / "photos" / "coffee.png", tmp_path / "photos" / "a.png")
    partial = tmp_path / "feats.h5.partial"
    partial.mkdir()
    (partial / "state.json").write_text("{}")
    (partial / "chunk-000000.h5").write_bytes(b"")
    script = ("import sys\nfrom vltools.cli import main\ntry:\n"
              "    main(['extract-regions', 'photos', '-o', 'feats.h5'])\n"
              "except SystemExit as exc:\n    print(exc.code, 'torch' in sys.modules)\n")
    result = run_process([sys.executable, "-c", script], cwd=tmp_path, capture_output=True)
    assert result.stdout.decode().split() == ["1", "False"]
    assert result.stderr.decode().splitlines() == [
        "vltools: error: feats.h5.partial: left by an interrupted run; continue it with --resume, or delete it"]
    assert sorted(p.name for p in partial.iterdir()) == ["chunk-000000.h5", "state.json"]
