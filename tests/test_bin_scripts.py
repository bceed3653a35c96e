"""Every script in bin/, run offline: it must say where to get each file (a URL) and where to put it (under DEST),
write nothing, and exit 1. Two ways: VLTOOLS_OFFLINE=1 with proxies that refuse any connection, and
VLTOOLS_OFFLINE=1 with stub network tools first on PATH that record any call, which proves the script stops before
touching the network (the first test alone passes for a script that ignores VLTOOLS_OFFLINE but whose download
fails). New scripts are picked up automatically."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_fixtures import run_process

BIN = Path(__file__).parents[1] / "bin"
SCRIPTS = sorted(p for p in BIN.iterdir() if p.is_file() and p.suffix in (".sh", ".py", ""))
NO_NETWORK = "http://127.0.0.1:9"  # the discard port: a connection through this proxy fails at once
# what a script could download with; python too, since scripts may download through it (nltk.download)
NETWORK_TOOLS = ("curl", "wget", "aria2c", "gdown", "python3", "python")


def run_offline(script: Path, dest: Path, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "VLTOOLS_OFFLINE": "1", "http_proxy": NO_NETWORK, "https_proxy": NO_NETWORK,
           "HTTP_PROXY": NO_NETWORK, "HTTPS_PROXY": NO_NETWORK, "ALL_PROXY": NO_NETWORK, "no_proxy": "",
           "NO_PROXY": "", **env}
    command = [sys.executable, str(script)] if script.suffix == ".py" else ["bash", str(script)]
    return run_process([*command, str(dest)], capture_output=True, text=True, env=env, cwd=cwd)


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


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_with_vltools_offline_calls_no_network_tool(script, tmp_path):
    """Stubs of curl, wget (and python, a downloader too) that succeed and leave a marker: a script that went on to
    download despite VLTOOLS_OFFLINE=1 would call one of them and find it working."""
    stubs, work, dest = tmp_path / "stubs", tmp_path / "work", tmp_path / "work" / "dest"
    marker = tmp_path / "network_tool_called"
    stubs.mkdir()
    work.mkdir()
    for tool in NETWORK_TOOLS:
        stub = stubs / tool
        stub.write_text(f'#!/bin/sh\necho "{tool} $*" >> "{marker}"\nexit 0\n')
        stub.chmod(0o755)
    result = run_offline(script, dest, work, PATH=f"{stubs}{os.pathsep}{os.environ.get('PATH', '')}",
                         PYTHON="python3")
    called = marker.read_text() if marker.exists() else ""
    assert not called, f"{script.name} called a network tool with VLTOOLS_OFFLINE=1:\n{called}"
    assert_says_what_and_where(script, result, dest)
    written = [p for p in work.rglob("*") if p.is_file()]
    assert not written, f"{script.name} wrote {written} with VLTOOLS_OFFLINE=1"
