"""The README's set-up as a new user follows it: `pip install .` of a clean copy of the source into a new virtual
environment gives a `vltools` command in that environment's `bin/` that runs (the packages vltools depends on are
taken from this test's own environment, so nothing is downloaded)."""

from __future__ import annotations

import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest
from pipeline_fixtures import run_process

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def source_files() -> list[Path]:
    """The files a fresh clone holds: git's tracked files, or the package, its metadata and README without git."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return [path.relative_to(ROOT) for path in [*ROOT.glob("vltools/**/*"), ROOT / "pyproject.toml", README]
                if path.is_file() and "__pycache__" not in path.parts]
    return [Path(name) for name in listed.decode().split("\0") if name and (ROOT / name).is_file()]


def test_readme_starts_with_the_set_up():
    first_block = README.read_text(encoding="utf-8").split("```")[1]
    assert "make venv" in first_block and ". .venv/bin/activate" in first_block
    assert "pip install" in first_block
    assert first_block.index("make venv") < first_block.index("make demo") < first_block.index("make test")


@pytest.mark.slow
def test_pip_install_gives_a_working_vltools_command(tmp_path):
    source = tmp_path / "clone"
    for name in source_files():
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # the new environment sees this one's packages after its own, the way an installed dependency is found
    Path(site, "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")

    installed = run_process([python, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index",
                             "--quiet", str(source)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr

    command = env_dir / "bin" / "vltools"
    shown = run_process([command, "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "extract-regions" in shown.stdout and "match" in shown.stdout
    where = subprocess.run([python, "-c", "import vltools; print(vltools.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, check=True).stdout
    assert Path(where).resolve().is_relative_to(Path(site).resolve())   # the installed copy, not the source tree
