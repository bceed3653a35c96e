"""Every script in bin/, run offline (VLTOOLS_OFFLINE=1, and proxies that refuse any connection): it must say
where to get each file and where to put it, write nothing, and exit 1. New scripts are picked up automatically."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(__file__).parents[1] / "bin"
SCRIPTS = sorted(p for p in BIN.iterdir() if p.is_file() and p.suffix in (".sh", ".py", ""))
NO_NETWORK = "http://127.0.0.1:9"  # the discard port: a connection through this proxy fails at once


def test_bin_has_scripts():
    assert SCRIPTS, f"no scripts found in {BIN}"


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_offline_says_what_to_fetch_and_where_and_exits_1(script, tmp_path):
    dest = tmp_path / "dest"
    env = {**os.environ, "VLTOOLS_OFFLINE": "1", "http_proxy": NO_NETWORK, "https_proxy": NO_NETWORK,
           "HTTP_PROXY": NO_NETWORK, "HTTPS_PROXY": NO_NETWORK, "ALL_PROXY": NO_NETWORK, "no_proxy": "",
           "NO_PROXY": ""}
    command = [sys.executable, str(script)] if script.suffix == ".py" else ["bash", str(script)]
    result = subprocess.run([*command, str(dest)], capture_output=True, text=True, env=env, cwd=tmp_path,
                            timeout=120)
    said = result.stdout + result.stderr
    assert result.returncode == 1, said
    assert "Traceback" not in said
    assert re.search(r"https?://\S+", said), f"{script.name} names no URL to fetch from:\n{said}"
    assert str(dest) in said, f"{script.name} does not say where to put the files ({dest}):\n{said}"
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not written, f"{script.name} wrote {written} while offline"
