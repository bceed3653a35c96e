"""What the five paper pipeline tests share: running a stage in-process and making the synthetic world."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from vltools.cli import cli


def run(*args: object) -> str:
    """Run `vltools --quiet ARGS` in-process; a non-zero exit fails the test with the stage's output."""
    result = CliRunner().invoke(cli, ["--quiet", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.stdout


def synth_world(folder: Path, images: int, pairs: int = 0, aux_images: int = 0) -> Path:
    """The deterministic synthetic world (seed 0) of `images` images, `pairs` image pairs and `aux_images`
    single images with captions, written to `folder`."""
    run("synth", folder, "--seed", "0", "--images", images, "--pairs", pairs, "--aux-images", aux_images)
    return folder
