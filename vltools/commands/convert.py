"""`vltools convert KIND ...`: import the field's formats as vltools files, and export them back.

One subcommand per format; each parses options and makes one call to the library function of its format (in
`vltools.data.converters` or `vltools.io`), which the Python API (`vltools.convert`) calls too: it reads, checks
and writes the output atomically (`-o PATH`, or standard output when absent).
"""

from __future__ import annotations

import click

from vltools.commands.options import SPLIT, Integer, output_option, primary_output
from vltools.data.converters import birds_to_words, bottom_up, karpathy, precomp
from vltools.io import coco
from vltools.io.progress import log

OUTPUT = click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
                      help="Output file (default: standard output).")
DTYPE = click.option("--dtype", type=click.Choice(["float32", "float16"]), default="float32", show_default=True,
                     help="Stored float type of the features (float32 keeps the values exactly).")
DROP_UNASSIGNED = click.option("--drop-unassigned", is_flag=True,
                               help="Drop images in no split list instead of giving them split 'unassigned'.")


@click.group("convert")
def command() -> None:
    """Import the field's formats (SCAN precomp, Karpathy, COCO, Flickr, Visual Genome, Birds-to-Words, CUB,
    webdataset shards, Hugging Face datasets, bottom-up features, SCAN vocabularies) as vltools files, and export
    vltools files back."""


def _wrote(count: int, what: str, output: str | None) -> None:
    from vltools.io.output import is_stdout

    log.info("wrote %d %s to %s", count, what, "standard output" if is_stdout(output) else output)


@primary_output()
@command.command("precomp")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option("--split", type=SPLIT, required=True, help="Split name: reads {split}_ims.npy, {split}_caps.txt.")
@output_option("--features", "features_out", type=click.Path(dir_okay=False), binary="HDF5",
               help="Features HDF5 to write.")
@click.option("--captions", "captions_out", type=click.Path(dir_okay=False), help="Captions JSONL to write.")
@click.option("--ids", "ids_file", type=click.Path(dir_okay=False),
              help="Image ids file (default: {split}_ids.txt or {split}_imagename.txt when present).")
@click.option("--captions-per-image", type=Integer(min=1),
              help="Captions per image, needed when there is neither an _ims.npy nor an ids file.")
@DTYPE
def precomp_command(directory: str, split: str, features_out: str | None, captions_out: str | None,
                    ids_file: str | None, captions_per_image: int | None, dtype: str) -> None:
    """SCAN / VSE++ / SGRAF precomp DIRECTORY -> features HDF5 (--features) and captions JSONL (--captions).

    Image ids come from the ids file, else are "{split}_{index}"; caption ids are "{image_id}#{k}"."""
    written = precomp.convert_precomp(directory, split, features_out, captions_out, ids_file, captions_per_image,
                                      dtype)
    for what, output in (("images", features_out), ("captions", captions_out)):
        if what in written:
            _wrote(written[what], what, output)


@primary_output("out_dir")
@command.command("to-precomp")
@click.argument("features", type=click.Path(dir_okay=False))
@click.argument("captions", type=click.Path(dir_okay=False, allow_dash=True))
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--split", type=SPLIT, required=True,
              help="Split name of the files written: {split}_ims.npy, _caps.txt, _ids.txt.")
@click.option("--field", type=click.Choice(precomp.EXPORT_FIELDS),
              help="Features dataset to export (default: regions if present, else global).")
def to_precomp_command(features: str, captions: str, out_dir: str, split: str, field: str | None) -> None:
    """Features HDF5 + captions JSONL -> precomp files in OUT_DIR, in the features' image order."""
    written = precomp.write_precomp(features, captions, out_dir, split, field)
    log.info("wrote %s", ", ".join(written["files"]))


@primary_output("output", stdout=True)
@command.command("karpathy")
@click.argument("dataset", type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--id", "id_field", type=click.Choice(karpathy.ID_FIELDS), default="filename", show_default=True,
              help="Image id: file name, COCO id, Karpathy imgid, or filepath/filename.")
@click.option("--text", "text_field", type=click.Choice(karpathy.TEXT_FIELDS), default="raw", show_default=True,
              help="Caption text: the raw sentence or its tokens joined by spaces.")
@click.option("--restval-as", type=SPLIT, help="Rename the restval split (e.g. train); default: keep 'restval'.")
@click.option("--only-split", "only_splits", type=SPLIT, multiple=True, help="Keep only this split (repeatable).")
def karpathy_command(dataset: str, output: str | None, id_field: str, text_field: str, restval_as: str | None,
                     only_splits: tuple[str, ...]) -> None:
    """Karpathy dataset_{coco,flickr8k,flickr30k}.json -> captions JSONL (caption_id = sentid)."""
    from vltools.io.records import write_records

    records = karpathy.read_karpathy(dataset, id_field, text_field, restval_as, set(only_splits) or None)
    _wrote(write_records(output, records), "captions", output)


@primary_output("output", stdout=True)
@command.command("coco")
@click.argument("coco_json", type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--split", type=SPLIT, help="Split field of every record (default: none).")
@click.option("--id", "id_field", type=click.Choice(coco.ID_FIELDS), default="id", show_default=True,
              help="Image id of an annotations file: the numeric id or the image file_name.")
def coco_command(coco_json: str, output: str | None, split: str | None, id_field: str) -> None:
    """COCO caption annotations, results JSON, or coco-caption SPICE input (its refs) -> captions JSONL."""
    from vltools.io.records import write_records

    records = coco.read_coco(coco_json, split, id_field)
    _wrote(write_records(output, records), "captions", output)


@primary_output("output", stdout=True)
@command.command("to-coco-results")
@click.argument("captions", type=click.Path(dir_okay=False, allow_dash=True))
@OUTPUT
def to_coco_results_command(captions: str, output: str | None) -> None:
    """Captions JSONL (one caption per image) -> COCO results JSON [{"image_id", "caption"}]."""
    _wrote(coco.write_coco_results(captions, output)["results"], "results", output)


@primary_output("output", stdout=True)
@command.command("flickr")
@click.argument("tokens", type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--train", type=click.Path(dir_okay=False), help="List of training image names.")
@click.option("--val", type=click.Path(dir_okay=False), help="List of validation image names.")
@click.option("--test", type=click.Path(dir_okay=False), help="List of test image names.")
@DROP_UNASSIGNED
def flickr_command(tokens: str, output: str | None, train: str | None, val: str | None, test: str | None,
                   drop_unassigned: bool) -> None:
    """Flickr8k / Flickr30k token file (name.jpg#k TAB caption) -> captions JSONL; image_id = name.jpg."""
    from vltools.data.converters import flickr
    from vltools.io.records import write_records

    records = flickr.convert_flickr(tokens, train, val, test, drop_unassigned)
    _wrote(write_records(output, records), "captions", output)


@primary_output("output", stdout=True)
@command.command("visual-genome")
@click.argument("regions", type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--image-data", type=click.Path(dir_okay=False),
              help="image_data.json: adds image_size [h, w] to each record.")
@click.option("--splits", type=click.Path(dir_okay=False), help="JSON {split: [image ids]} (densecap_splits.json).")
@click.option("--clip-boxes", is_flag=True, help="Clip boxes to the image (needs --image-data).")
@DROP_UNASSIGNED
def visual_genome_command(regions: str, output: str | None, image_data: str | None, splits: str | None,
                          clip_boxes: bool, drop_unassigned: bool) -> None:
    """Visual Genome region_descriptions.json -> region captions JSONL (box = x1 y1 x2 y2)."""
    from vltools.data.converters.visual_genome import visual_genome_records
    from vltools.io.records import write_records

    records = visual_genome_records(regions, image_data, splits, clip_boxes, drop_unassigned)
    _wrote(write_records(output, records), "regions", output)


@primary_output("output", stdout=True)
@command.command("birds-to-words")
@click.argument("tsv", type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--image-names", type=click.Choice(birds_to_words.IMAGE_NAMES), default="path", show_default=True,
              help="Image ids: the URL path (photos/ID/medium.jpg), its basename, or the whole URL.")
def birds_to_words_command(tsv: str, output: str | None, image_names: str) -> None:
    """Birds-to-Words TSV -> pairs JSONL, one record per description; pair_id is a hash of the two URLs."""
    from vltools.io.records import write_records

    records = birds_to_words.read_birds_to_words(tsv, image_names)
    _wrote(write_records(output, records), "pair descriptions", output)


@primary_output("output", stdout=True)
@command.command("cub")
@click.argument("text_dir", type=click.Path(file_okay=False))
@OUTPUT
@click.option("--split-list", "split_files", type=(SPLIT, str), multiple=True, metavar="SPLIT FILE",
              help="FILE lists image ids (<class>/<image>) or class names of SPLIT; repeatable.")
@DROP_UNASSIGNED
def cub_command(text_dir: str, output: str | None, split_files: tuple[tuple[str, str], ...],
                drop_unassigned: bool) -> None:
    """CUB text_c10 folder (<class>/<image>.txt, a caption a line) -> captions JSONL; image_id = <class>/<image>."""
    from vltools.data.converters import cub
    from vltools.io.records import write_records

    records = cub.read_cub(text_dir, split_files, drop_unassigned)
    _wrote(write_records(output, records), "captions", output)


@primary_output("output", stdout=True)
@command.command("webdataset")
@click.argument("shards", nargs=-1, required=True, type=click.Path(dir_okay=False))
@OUTPUT
@click.option("--split", type=SPLIT, help="Split field of every record (default: none).")
@click.option("--strict", is_flag=True, help="Stop with an error at the first image without a caption (exit 1, no "
                                             "output) instead of skipping and counting it.")
def webdataset_command(shards: tuple[str, ...], output: str | None, split: str | None, strict: bool) -> None:
    """Webdataset / img2dataset shards (KEY.jpg beside KEY.txt and/or KEY.json with "caption") -> captions JSONL
    with the image ids `extract-regions SHARD.tar` gives (the member names); caption_id = <image id>#0. Two .txt
    (or two .json) captions of one key are an error naming both members."""
    from vltools.data.converters import webdataset
    from vltools.io.records import write_records

    records = webdataset.read_webdataset(shards, split, strict)
    _wrote(write_records(output, records), "captions", output)


@primary_output("output")
@command.command("hf")
@click.argument("dataset", type=click.Path())
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False),
              help="New folder to write: images/, images.jsonl, captions.jsonl.")
@click.option("--image-column", "image_column", multiple=True, metavar="COLUMN",
              help="The image: an Image column, or a text column of paths; repeated, text columns joined as a path "
                   "(default: the Image column, else filepath + filename).")
@click.option("--caption-column", metavar="COLUMN",
              help="Captions: text, a list of texts or Karpathy sentences (default: caption, captions, sentences, "
                   "text or alt_text).")
@click.option("--id-column", metavar="COLUMN",
              help="Image ids (default: filename, file_name, image_id, img_id, cocoid, imgid or id; else the row "
                   "number).")
@click.option("--split-column", metavar="COLUMN",
              help="Splits (default: split; else the DatasetDict's split or the shard's name).")
@click.option("--image-root", type=click.Path(file_okay=False),
              help="Folder that relative image paths are under (default: the dataset's folder).")
@click.option("--force", is_flag=True, help="Replace OUTPUT if it holds an earlier convert hf output.")
def hf_command(dataset: str, output: str, image_column: tuple[str, ...], caption_column: str | None,
               id_column: str | None, split_column: str | None, image_root: str | None, force: bool) -> None:
    """Hugging Face image-caption dataset (a save_to_disk folder, a parquet file or a folder of parquet shards:
    nlphuji/flickr30k, yerevann/coco-karpathy, ...) -> images/ + images.jsonl + captions.jsonl in OUTPUT, ids and
    splits kept, each image written once. Needs pip install 'vltools[hf]'.

    Example: vltools convert hf flickr30k/ -o f30k && vltools extract-regions f30k/images.jsonl > feats.h5
    """
    from vltools.data.converters.hf import convert_hf

    written = convert_hf(dataset, output, image_column, caption_column, id_column, split_column, image_root, force)
    log.info("wrote %d images and %d captions to %s", written["images"], written["captions"], output)


@primary_output("output", stdout=True)
@command.command("bottom-up")
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@output_option("-o", "--output", type=click.Path(dir_okay=False), binary="HDF5",
               help="Features HDF5 (default: standard output, never a terminal).")
@click.option("--fields", default=",".join(bottom_up.ANDERSON_FIELDS), show_default=True,
              help="TSV column names, comma separated (LXMERT: " + ",".join(bottom_up.LXMERT_FIELDS) + ").")
@click.option("--max-regions", type=Integer(min=1),
              help="Keep at most this many boxes per image and pad to it (default: the most of any image).")
@DTYPE
def bottom_up_command(inputs: tuple[str, ...], output: str | None, fields: str, max_regions: int | None,
                      dtype: str) -> None:
    """Bottom-up attention TSV file(s), or one folder of per-image .npz -> features HDF5."""
    _wrote(bottom_up.convert_bottom_up(inputs, output, fields, max_regions, dtype)["images"], "images", output)


@primary_output("output", stdout=True)
@command.command("scan-vocab")
@click.argument("scan_json", type=click.Path(dir_okay=False))
@OUTPUT
def scan_vocab_command(scan_json: str, output: str | None) -> None:
    """SCAN / SGRAF vocabulary JSON -> vltools vocabulary file (same indices)."""
    from vltools.data.converters.scan_vocab import convert_scan_vocab

    _wrote(convert_scan_vocab(scan_json, output)["words"], "words", output)


@primary_output("output", stdout=True)
@command.command("to-scan-vocab")
@click.argument("vocab_file", type=click.Path(dir_okay=False))
@OUTPUT
def to_scan_vocab_command(vocab_file: str, output: str | None) -> None:
    """vltools vocabulary file -> SCAN / SGRAF vocabulary JSON (word2idx, idx2word, idx)."""
    from vltools.data.converters.scan_vocab import convert_to_scan_vocab

    _wrote(convert_to_scan_vocab(vocab_file, output)["words"], "words", output)


@primary_output("output")
@command.command("sgraf-checkpoint")
@click.argument("checkpoint", type=click.Path(dir_okay=False))
@click.option("--vocab", required=True, type=click.Path(dir_okay=False),
              help="The vocabulary it was trained with (SCAN JSON such as f30k_precomp_vocab.json, or vltools).")
@click.option("--trust", is_flag=True, help="Load the pickle (it can run code from the file): only for trusted files.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="vltools checkpoint to write.")
def sgraf_checkpoint_command(checkpoint: str, vocab: str, trust: bool, output: str) -> None:
    """Released SGRAF checkpoint (model_best.pth.tar) -> vltools checkpoint for `match`, `train --resume`."""
    from vltools.data.converters.sgraf_checkpoint import convert_sgraf_checkpoint

    written = convert_sgraf_checkpoint(checkpoint, vocab, output, trust)
    log.info("wrote %s model (%s) to %s", written["model"], ", ".join(f"{k}={v}" for k, v in written["config"].items()),
             output)


@primary_output("output")
@command.command("bottom-up-weights")
@click.argument("weights", type=click.Path(dir_okay=False))
@click.option("--trust", is_flag=True, help="Load a pickle (.pkl; it can run code from the file): only for trusted "
                                            "files.")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="vltools checkpoint to write.")
def bottom_up_weights_command(weights: str, trust: bool, output: str) -> None:
    """Released bottom-up-attention detector weights (bottom-up-attention.pytorch's .pth, or
    py-bottom-up-attention's .pkl) -> vltools checkpoint of the `bottom-up` detector (bin/fetch_bottom_up_weights.sh).

    Example: vltools convert bottom-up-weights bua-caffe-frcn-r101_k10-100.pth --trust -o bua.pt
    """
    from vltools.data.converters.bottom_up_weights import save_bottom_up_checkpoint

    written = save_bottom_up_checkpoint(weights, output, trust)
    log.info("wrote the bottom-up detector (%s layout) to %s", written["layout"], output)
