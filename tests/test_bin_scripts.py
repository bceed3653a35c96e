"""Every script in bin/, run offline: it must say where to get each file (a URL) and where to put it (under DEST),
write nothing, and exit 1. Two ways: VLTOOLS_OFFLINE=1 with proxies that refuse any connection, and
VLTOOLS_OFFLINE=1 with stub network tools first on PATH that record any call, which proves the script stops before
touching the network (the first test alone passes for a script that ignores VLTOOLS_OFFLINE but whose download
fails). New scripts are picked up automatically."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pipeline_fixtures import run_process

from vltools.io.released import RELEASED

BIN = Path(__file__).parents[1] / "bin"
SCRIPTS = sorted(p for p in BIN.iterdir() if p.is_file() and p.suffix in (".sh", ".py", ""))
NO_NETWORK = "http://127.0.0.1:9"  # the discard port: a connection through this proxy fails at once
# what a script could download with; python too, since scripts may download through it (nltk.download)
NETWORK_TOOLS = ("curl", "wget", "aria2c", "gdown", "python3", "python")


def run_offline(script: Path, dest: Path, cwd: Path, *flags: str, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLTOOLS_OFFLINE": "1", "http_proxy": NO_NETWORK, "https_proxy": NO_NETWORK,
           "HTTP_PROXY": NO_NETWORK, "HTTPS_PROXY": NO_NETWORK, "ALL_PROXY": NO_NETWORK, "no_proxy": "",
           "NO_PROXY": "", **env}
    command = [sys.executable, str(script)] if script.suffix == ".py" else ["bash", str(script)]
    return run_process([*command, *flags, str(dest)], capture_output=True, text=True, env=env, cwd=cwd)


def assert_says_what_and_where(script: Path, result: subprocess.CompletedProcess, dest: Path) -> None:
    said = result.stdout + result.stderr
    assert result.returncode == 1, said
    assert "Traceback" not in said
    assert re.search(r"https?://\S+", said), f"{script.name} names no URL to fetch from:\n{said}"
    assert str(dest) in said, f"{script.name} does not say where to put the files ({dest}):\n{said}"


def test_bin_has_scripts():
    assert SCRIPTS, f"no scripts found in {BIN}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_offline_says_what_to_fetch_and_where_and_exits_1(script, tmp_path):
    dest = tmp_path / "dest"
    result = run_offline(script, dest, tmp_path)
    assert_says_what_and_where(script, result, dest)
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not written, f"{script.name} wrote {written} while offline"


def network_stubs(folder: Path, marker: Path) -> str:
    """Stubs of the network tools in `folder` that record each call in `marker`; the PATH that puts them first."""
    folder.mkdir()
    for tool in NETWORK_TOOLS:
        stub = folder / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{marker}"\nexit 0\n')
        stub.chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_with_vltools_offline_calls_no_network_tool(script, tmp_path):
    """Stubs of curl, wget (and python, a downloader too) that succeed and leave a marker: a script that went on to
    download despite VLTOOLS_OFFLINE=1 would call one of them and find it working."""
    work, dest = tmp_path / "work", tmp_path / "work" / "dest"
    marker = tmp_path / "network_tool_called"
    work.mkdir()
    result = run_offline(script, dest, work, PATH=network_stubs(tmp_path / "stubs", marker), PYTHON="python3")
    called = marker.read_text() if marker.exists() else ""
    assert not called, f"{script.name} called a network tool with VLTOOLS_OFFLINE=1:\n{called}"
    assert_says_what_and_where(script, result, dest)
    written = [p for p in work.rglob("*") if p.is_file()]
    assert not written, f"{script.name} wrote {written} with VLTOOLS_OFFLINE=1"


def test_sgraf_models_offline_names_the_two_archives_and_the_small_vocabularies_in_one_sentence(tmp_path):
    """It once failed after listing the archives with 'f30k_precomp_vocab.json not found; run bin/fetch_precomp.sh
    first', a script that fetches SCAN's whole data.zip (tens of GB) for a 0.3 MB vocabulary."""
    dest = tmp_path / "dest"
    said = run_offline(BIN / "fetch_sgraf_models.sh", dest, tmp_path).stderr
    assert said.count("\n") == 1, said
    raw = "https://raw.githubusercontent.com/Paranioar/SGRAF/e21219aa7433f6f164dcb3c3b7b7fb0f5a271c7d/vocab"
    for url, path in [("https://drive.google.com/file/d/1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj/view",
                       "Flickr30K_SGRAF.zip"),
                      ("https://drive.google.com/file/d/1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag/view", "MSCOCO_SGRAF.zip"),
                      (f"{raw}/f30k_precomp_vocab.json", "vocab/f30k_precomp_vocab.json"),
                      (f"{raw}/coco_precomp_vocab.json", "vocab/coco_precomp_vocab.json")]:
        assert f"{url} to {dest / path}" in said
    assert "fetch_precomp" not in said and "data.zip" not in said


def test_sgraf_models_offline_names_only_what_is_missing(tmp_path):
    dest = tmp_path / "dest"
    (dest / "vocab").mkdir(parents=True)
    (dest / "vocab" / "coco_precomp_vocab.json").write_text("{}")
    said = run_offline(BIN / "fetch_sgraf_models.sh", dest, tmp_path, "--only", "coco").stderr
    assert "MSCOCO_SGRAF.zip" in said and "vocab" not in said and "Flickr30K" not in said


COMMANDS = sorted({model.download.command for model in RELEASED.values()})


@pytest.mark.parametrize("command", COMMANDS)
def test_every_released_model_command_takes_its_flags_and_offline_says_what_and_where(command, tmp_path):
    """The commands `vltools models available` and the missing-model errors print (vltools.io.released) run as
    printed: with VLTOOLS_OFFLINE=1 they exit 1 naming what to fetch, not 2 for an unknown flag."""
    script, *flags = shlex.split(command)
    dest = tmp_path / "dest"
    result = run_offline(Path(__file__).parents[1] / script, dest, tmp_path, *flags)
    assert_says_what_and_where(Path(script), result, dest)


def fake_sgraf_archive(path: Path, prefix: str) -> None:
    """An archive laid out as the released evaluation.py reads it: Flickr30K_SGRAF/f30k_SAF/model_best.pth.tar
    (the top folder's name holds both SGR and SAF)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for module in ("SAF", "SGR"):
            archive.writestr(f"{path.stem}/{prefix}_{module}/model_best.pth.tar", f"{prefix} {module} weights")
            archive.writestr(f"{path.stem}/{prefix}_{module}/log/train.log", "log")


@pytest.mark.skipif(shutil.which("unzip") is None, reason="the script unpacks with unzip")
@pytest.mark.parametrize("data, archive", [("f30k", "Flickr30K_SGRAF.zip"), ("coco", "MSCOCO_SGRAF.zip")])
def test_sgraf_models_with_the_files_in_place_registers_the_names_the_table_gives_its_command(data, archive, tmp_path):
    """With the archive and vocabulary put in place by hand and VLTOOLS_OFFLINE=1, `--only DATA` converts each
    module's own checkpoint (f30k_SGR, not the first path holding 'SGR') and registers exactly the models that
    vltools.io.released says its command gets, touching no network tool."""
    work, dest = tmp_path / "work", tmp_path / "work" / "dest"
    marker, calls = tmp_path / "network_tool_called", tmp_path / "vltools_calls"
    fake_sgraf_archive(dest / archive, "f30k" if data == "f30k" else "coco")
    (dest / "vocab").mkdir()
    (dest / "vocab" / f"{data}_precomp_vocab.json").write_text("{}")
    vltools = tmp_path / "vltools"
    vltools.write_text(f'#!/bin/sh\necho "$*" >> "{calls}"\n')
    vltools.chmod(0o755)
    result = run_offline(BIN / "fetch_sgraf_models.sh", dest, work, "--only", data,
                         PATH=network_stubs(tmp_path / "stubs", marker), PYTHON="python3", VLTOOLS=str(vltools))
    assert result.returncode == 0, result.stderr
    assert not marker.exists(), marker.read_text()
    lines = calls.read_text().splitlines()
    converted = {line.split(" -o ")[1]: line.split()[2] for line in lines if line.startswith("convert ")}
    assert converted == {str(dest / f"{m}-{data}.pt"): str(dest / data / archive[:-4] / f"{data}_{m.upper()}"
                                                             / "model_best.pth.tar") for m in ("sgr", "saf")}
    assert all(f"--vocab {dest}/vocab/{data}_precomp_vocab.json --trust" in line for line in lines
               if line.startswith("convert "))
    registered = {line.split()[3] for line in lines if line.startswith("models add --replace ")}
    assert registered == {f"sgr-{data}", f"saf-{data}", f"sgraf-{data}", "sgraf"}
    assert registered == {name for name, model in RELEASED.items()
                          if model.download.command == f"bin/fetch_sgraf_models.sh --only {data}"} | {"sgraf"}
