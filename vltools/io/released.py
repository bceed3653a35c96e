"""The released models vltools fetches, converts and registers by name: one table, read by `vltools models
available` and by every error about a model name that the store does not hold, so that both say the same command.

Each command is a script in bin/ of the vltools source tree (git checkout or sdist; a wheel does not install it).
Sizes are what the command downloads, rounded: the released checkpoints are float32 state dicts, so their size is
4 bytes per parameter of the released configurations (SGR 18.1M and SAF 17.5M parameters with the Flickr30K
vocabulary, 19.0M and 18.4M with COCO's, the bottom-up detector 65.6M), and zip compresses such weights little.
"""

from __future__ import annotations

from dataclasses import dataclass

from vltools.errors import argument

SGRAF_REPOSITORY = "https://github.com/Paranioar/SGRAF"
MATCH_NEEDS = ("curl or wget, and unzip; `match` then reads bottom-up-attention features of your images "
               "(`extract-regions --regions bottom-up --detector-weights bottom-up-k36 --num-regions 36`, or "
               "SCAN's precomputed features from bin/fetch_precomp.sh)")
DETECTOR_NEEDS = ("curl or wget (the SharePoint link may need a browser: then put the file where the script says); "
                  "for class names, `--detector-vocab DIR` with the released objects_vocab.txt and "
                  "attributes_vocab.txt")


@dataclass(frozen=True)
class Download:
    """What one command fetches: the command (flags included), its download size in MB, where from, what else."""

    command: str
    size_mb: int
    source: str
    needs: str

    def size(self) -> str:
        """The download size in words, e.g. 'about 140 MB'."""
        return f"about {self.size_mb} MB"


@dataclass(frozen=True)
class Released:
    """A released model: its store name, what it is, the argument that takes it (its Python name: model,
    detector_weights; `vltools.errors.argument` spells it as an option on the command line), and its download."""

    name: str
    what: str
    option: str
    download: Download


def _sgraf(data: str, title: str, archive: str, drive_id: str, size_mb: int) -> Download:
    return Download(f"bin/fetch_sgraf_models.sh --only {data}", size_mb,
                    f"{archive} (https://drive.google.com/file/d/{drive_id}/view, from the SGRAF README) and "
                    f"vocab/{data}_precomp_vocab.json of {SGRAF_REPOSITORY} ({title} vocabulary)", MATCH_NEEDS)


def _bottom_up(flag: str, file: str) -> Download:
    return Download(f"bin/fetch_bottom_up_weights.sh{flag}", 260,
                    f"{file}, MILVLG's conversion of the released Caffe weights (the README of "
                    "https://github.com/MILVLG/bottom-up-attention.pytorch, 'Pre-trained models')", DETECTOR_NEEDS)


F30K = _sgraf("f30k", "Flickr30K", "Flickr30K_SGRAF.zip", "1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj", 140)
COCO = _sgraf("coco", "MS-COCO", "MSCOCO_SGRAF.zip", "1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag", 150)
RELEASED = {model.name: model for model in [
    Released("sgraf", "SGRAF (SGR + SAF ensemble) trained on Flickr30K (MS-COCO after fetching with --default coco)",
             "model", F30K),
    Released("sgraf-f30k", "SGRAF (SGR + SAF ensemble) trained on Flickr30K", "model", F30K),
    Released("sgr-f30k", "SGR trained on Flickr30K", "model", F30K),
    Released("saf-f30k", "SAF trained on Flickr30K", "model", F30K),
    Released("sgraf-coco", "SGRAF (SGR + SAF ensemble) trained on MS-COCO", "model", COCO),
    Released("sgr-coco", "SGR trained on MS-COCO", "model", COCO),
    Released("saf-coco", "SAF trained on MS-COCO", "model", COCO),
    Released("bottom-up-k36", "bottom-up-attention detector, 36 boxes per image (the features SCAN and SGRAF "
                              "were trained on)", "detector_weights",
             _bottom_up(" --fixed36", "bua-caffe-frcn-r101-k36.pth")),
    Released("bottom-up", "bottom-up-attention detector, 10 to 100 boxes per image", "detector_weights",
             _bottom_up("", "bua-caffe-frcn-r101-k10-100.pth")),
]}


def _downloads(option: str) -> dict[Download, list[str]]:
    """Each download of the released models that argument `option` (its Python name) takes, with their names."""
    commands: dict[Download, list[str]] = {}
    for model in RELEASED.values():
        if model.option == option:
            commands.setdefault(model.download, []).append(model.name)
    return commands


def registered_by(option: str) -> str:
    """`COMMAND (NAMES), ...`: the commands that register the released models argument `option` (its Python name,
    as RELEASED stores it: detector_weights) takes, for a help text. An option no released model is for is a
    ValueError, so that a spelling other than the table's (`--detector-weights`) fails instead of listing none."""
    commands = _downloads(option)
    if not commands:
        raise ValueError(f"no released model is for {option!r} (RELEASED names arguments as Python does)")
    return ", ".join(f"{download.command} ({', '.join(names)})" for download, names in commands.items())


def how_to_get(name: str, option: str) -> str:
    """What to do about argument `option` (its Python name) = NAME when the store does not hold NAME: the command
    of a released model (flags included), else the commands of the released models that `option` takes; one
    sentence, no line break."""
    own = "register your own checkpoints with `vltools models add NAME CKPT...`"
    released = RELEASED.get(name)
    if released is not None:
        download = released.download
        used = "" if released.option == option else \
            f" (it is for {argument(released.option)}, not {argument(option)})"
        return (f"{name} is the released {released.what}{used}: run `{download.command}` in the vltools source "
                f"tree (it downloads {download.size()}, converts and registers it)")
    commands = _downloads(option)
    if not commands:
        return own
    listed = ", ".join(f"{', '.join(names)} (`{download.command}`, {download.size()})"
                       for download, names in commands.items())
    return (f"released models for {argument(option)}: {listed}, each command run in the vltools source tree "
            f"(`vltools models available` says more); or {own}")


@dataclass(frozen=True)
class OpenClipTag:
    """An OpenCLIP pretrained model vltools lists (`models available`): architecture, pretrained tag, download size
    in MB (float32 weights, as open_clip fetches them), the Hugging Face repository it comes from, what it is. The
    first tag of an architecture is the one `openclip:ARCH` without a tag takes."""

    arch: str
    tag: str
    size_mb: int
    repository: str
    what: str

    @property
    def name(self) -> str:
        """The `--model` value that names it: `openclip:ARCH:TAG`."""
        return f"openclip:{self.arch}:{self.tag}"

    def size(self) -> str:
        """The download size in words, e.g. 'about 605 MB'."""
        return f"about {self.size_mb} MB"


OPENCLIP_TAGS = [
    OpenClipTag("ViT-B-32", "laion2b_s34b_b79k", 605, "laion/CLIP-ViT-B-32-laion2B-s34B-b79K",
                "OpenCLIP ViT-B/32 trained on LAION-2B (151M parameters)"),
    OpenClipTag("ViT-B-32", "openai", 605, "timm/vit_base_patch32_clip_224.openai",
                "OpenAI's CLIP ViT-B/32 (151M parameters; trained with QuickGELU: ViT-B-32-quickgelu matches it)"),
    OpenClipTag("ViT-B-16", "laion2b_s34b_b88k", 599, "laion/CLIP-ViT-B-16-laion2B-s34B-b88K",
                "OpenCLIP ViT-B/16 trained on LAION-2B (150M parameters)"),
    OpenClipTag("ViT-L-14", "laion2b_s32b_b82k", 1710, "laion/CLIP-ViT-L-14-laion2B-s32B-b82K",
                "OpenCLIP ViT-L/14 trained on LAION-2B (428M parameters)"),
]


def default_openclip_tag(arch: str) -> str | None:
    """The pretrained tag `openclip:ARCH` takes when it names none (the first of OPENCLIP_TAGS for ARCH), or None
    for an architecture the table does not list (open_clip's own first tag for it then)."""
    return next((entry.tag for entry in OPENCLIP_TAGS if entry.arch == arch), None)
