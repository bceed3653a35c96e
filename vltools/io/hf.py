"""Hugging Face `datasets` on disk, read as image-caption rows: a `save_to_disk` folder (a Dataset: `state.json`
beside `data-*.arrow`; a DatasetDict: `dataset_dict.json` and one folder per split) or parquet files (one, or a
folder of shards as the Hub serves them, `data/<split>-00000-of-00004.parquet`). Needs the optional extra
(`pip install 'vltools[hf]'`: `datasets` and pyarrow), imported only when a dataset is read.

The layouts people download, and what is read from them (auto-detected; each column can be named instead):
- nlphuji/flickr30k (and its train/val/test copies): `image` (the `datasets` Image feature: a struct
  {bytes, path}), `caption` (a list of 5 str), `sentids` (a list of 5 str), `split`, `img_id` (str),
  `filename` ("1000092795.jpg").
- yerevann/coco-karpathy: `filepath` ("val2014"), `filename` ("COCO_val2014_000000391895.jpg"), `sentences` (a
  list of str), `sentids` (a list of int), `cocoid`, `imgid`, `split` (train, val, test, restval), `url`; no image
  bytes: an image is the file `filepath/filename` under an image root (the COCO folder).
- Karpathy COCO with one row a caption (bitmind/MS-COCO): `image`, `sentences` a struct {tokens, raw, imgid,
  sentid}, `filename`, `cocoid`, `split`: the rows of one image are merged, its image read once.
Image: the first Image column (`image` first), else `filepath` + `filename` joined as a path; an Image value's
bytes when present, else its path (absolute, or under the image root: by default the dataset's folder). Caption:
the first of CAPTION_COLUMNS, a str, a list of str, a struct with `raw`, or a list of those. Id: the first of
ID_COLUMNS (`filename` first, as `convert karpathy` and `convert flickr` name images), else the row number.
Caption ids: the struct's `sentid`, else `sentids` when it holds one per caption, else `<image id>#<k>`. Split:
the `split` column, else the DatasetDict's split or the shard's name. Rows are numbered from 0 as `dataset[row]`
numbers them, within each split of a DatasetDict and each parquet file; every error names the row and the column.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from vltools.errors import VLToolsError, argument, input_error
from vltools.io.ids import id_problem
from vltools.io.kinds import same_file

INSTALL = "pip install 'vltools[hf]'"
CAPTION_COLUMNS = ("caption", "captions", "sentences", "text", "alt_text")
ID_COLUMNS = ("filename", "file_name", "image_id", "img_id", "cocoid", "imgid", "id")
SPLIT_COLUMN = "split"
KARPATHY_PATH = ("filepath", "filename")
SENTIDS = "sentids"
SHARD_NAME = re.compile(r"(?P<split>[\w.]+?)-\d{5}-of-\d{5}\.parquet")   # the Hub's data/<split>-00000-of-00004


def _pyarrow():
    """pyarrow and pyarrow.parquet, or the one-line error saying how to install them."""
    try:
        import datasets  # noqa: F401  (the extra's package; pyarrow comes with it)
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise VLToolsError(f"reading Hugging Face datasets needs the datasets package: {INSTALL}") from None
    return pyarrow


def is_dataset_folder(folder: Path) -> bool:
    """Whether `folder` is a `save_to_disk` folder (a Dataset's or a DatasetDict's)."""
    return (folder / "state.json").is_file() or (folder / "dataset_dict.json").is_file()


def parquet_files(folder: Path) -> list[Path]:
    """The parquet files under `folder`, sorted by path."""
    return sorted(path for path in folder.rglob("*.parquet") if path.is_file())


@dataclass(frozen=True)
class Part:
    """Rows read as one table: a `save_to_disk` Dataset folder (`key`: the split of a DatasetDict, else None) or a
    parquet file; `split`: the split its rows belong to when no column says (the DatasetDict's, the shard's)."""

    source: Path
    key: str | None
    split: str | None
    parquet: bool

    @property
    def name(self) -> str:
        """The part in messages: its file or folder, and a DatasetDict's split."""
        return f"{self.source}: split {self.key}" if self.key is not None else str(self.source)


def dataset_parts(path: str | os.PathLike) -> list[Part]:
    """The parts of the dataset at `path` (a `save_to_disk` folder, a parquet file, or a folder of parquet files),
    in order: a DatasetDict's splits as listed, parquet files sorted by path."""
    path = Path(path)
    if path.is_dir() and (path / "dataset_dict.json").is_file():
        try:
            splits = json.loads((path / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise input_error(path / "dataset_dict.json", None, f"not a DatasetDict's index ({exc})",
                              "save the dataset again with save_to_disk") from None
        return [Part(path, str(split), str(split), False) for split in splits]
    if path.is_dir() and (path / "state.json").is_file():
        return [Part(path, None, None, False)]
    files = parquet_files(path) if path.is_dir() else [path]
    if not files:
        raise input_error(path, None, "neither a save_to_disk folder (state.json, dataset_dict.json) nor parquet "
                          "files", "give the folder save_to_disk wrote, or the dataset's parquet files")
    return [Part(file, None, (match := SHARD_NAME.fullmatch(file.name)) and match["split"], True) for file in files]


def _disk_table(source: Path, key: str | None):
    """The memory-mapped arrow table of a `save_to_disk` folder (a DatasetDict's split `key`), opened once while its
    `state.json` stays the same."""
    return _opened_table(same_file((source / key if key is not None else source) / "state.json"), source, key)


@functools.lru_cache(maxsize=4)
def _opened_table(stamp: tuple[object, ...], source: Path, key: str | None):
    _pyarrow()
    import datasets

    try:
        loaded = datasets.load_from_disk(str(source))
    except (OSError, ValueError, KeyError, TypeError, FileNotFoundError) as exc:
        raise input_error(source, None, f"cannot be read as a save_to_disk dataset ({exc})",
                          "save it again with save_to_disk") from None
    return (loaded[key] if key is not None else loaded).data.table


def _parquet_file(source: Path):
    """The opened parquet file `source`, opened once while it stays the same."""
    return _opened_parquet(same_file(source), source)


@functools.lru_cache(maxsize=8)
def _opened_parquet(stamp: tuple[object, ...], source: Path):
    pyarrow = _pyarrow()
    try:
        return pyarrow.parquet.ParquetFile(source)
    except (OSError, pyarrow.ArrowException) as exc:
        raise input_error(source, None, f"not a readable parquet file ({exc})",
                          "download it again, or give the dataset's parquet files") from None


def schema(part: Part):
    """The arrow schema of `part`'s rows."""
    return _parquet_file(part.source).schema_arrow if part.parquet else _disk_table(part.source, part.key).schema


def row_count(part: Part) -> int:
    """How many rows `part` holds."""
    return _parquet_file(part.source).metadata.num_rows if part.parquet else _disk_table(part.source,
                                                                                          part.key).num_rows


def column_values(part: Part, column: str) -> list:
    """Every value of `column` in `part`, as Python objects, in row order."""
    if part.parquet:
        return _parquet_file(part.source).read(columns=[column]).column(column).to_pylist()
    return _disk_table(part.source, part.key).column(column).to_pylist()


@functools.lru_cache(maxsize=2)
def _row_group(stamp: tuple[object, ...], group: int, column: str):
    return _opened_parquet(stamp, Path(stamp[0])).read_row_group(group, columns=[column])


def cell(part: Part, row: int, column: str) -> object:
    """The value of `column` in `row` of `part` (a parquet file's row group is read once for its rows in turn)."""
    if not part.parquet:
        return _disk_table(part.source, part.key).column(column).slice(row, 1).to_pylist()[0]
    metadata = _parquet_file(part.source).metadata
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        if row < rows:
            return _row_group(same_file(part.source), group, column).column(column).slice(row, 1).to_pylist()[0]
        row -= rows
    raise IndexError(row)


def _is_image(arrow_type: object) -> bool:
    """Whether an arrow type is the `datasets` Image feature's storage, a struct {bytes, path}."""
    pyarrow = _pyarrow()
    return (pyarrow.types.is_struct(arrow_type)
            and {arrow_type.field(i).name for i in range(arrow_type.num_fields)} >= {"bytes", "path"})


def _is_text(arrow_type: object) -> bool:
    pyarrow = _pyarrow()
    return pyarrow.types.is_string(arrow_type) or pyarrow.types.is_large_string(arrow_type)


def _is_sentence(arrow_type: object) -> bool:
    """A caption's type: text, or a Karpathy sentence struct with its `raw` text."""
    pyarrow = _pyarrow()
    return _is_text(arrow_type) or (pyarrow.types.is_struct(arrow_type) and arrow_type.get_field_index("raw") >= 0
                                    and _is_text(arrow_type.field("raw").type))


def _is_list(arrow_type: object) -> bool:
    pyarrow = _pyarrow()
    return pyarrow.types.is_list(arrow_type) or pyarrow.types.is_large_list(arrow_type) or \
        pyarrow.types.is_fixed_size_list(arrow_type)


def _is_caption(arrow_type: object) -> bool:
    return _is_sentence(arrow_type) or (_is_list(arrow_type) and _is_sentence(arrow_type.value_type))


def _is_id(arrow_type: object) -> bool:
    pyarrow = _pyarrow()
    return _is_text(arrow_type) or pyarrow.types.is_integer(arrow_type)


@dataclass(frozen=True)
class Columns:
    """The columns an image-caption dataset is read by: `image` (one Image column, or text columns joined as a
    file's path), `caption` (None: not read), `id` (None: the row number), `split` (None: the part's split)."""

    image: tuple[str, ...]
    caption: str | None
    id: str | None
    split: str | None


def _wrong_type(part: Part, column: str, wanted: str, fix: str) -> VLToolsError:
    """The error of a column whose type is not `wanted`, naming its first row's value."""
    value = cell(part, 0, column) if row_count(part) else None
    shown = json.dumps(value, default=lambda v: f"<{len(v)} bytes>" if isinstance(v, bytes) else str(v))[:60]
    return input_error(part.name, f"row 0, column {column!r}", f"holds {shown} ({schema(part).field(column).type}), "
                       f"not {wanted}", fix)


def _given(part: Part, column: str, what: str, name: str) -> None:
    """Refuse a column named by the user (argument `name`) that `part` does not hold, listing those it does."""
    names = schema(part).names
    if column not in names:
        raise input_error(part.name, None, f"no column {column!r} for the {what}",
                          f"give {argument(name)} one of {', '.join(names)}")


def columns(part: Part, image: Sequence[str] = (), caption: str | None = None, id: str | None = None,
            split: str | None = None, captions: bool = True) -> Columns:
    """The columns of `part` for the image, caption (only when `captions`), id and split: those given (checked),
    else the known layouts' (see the module's notes); a missing or mistyped one is a one-line error."""
    types = {field.name: field.type for field in schema(part)}
    fix_image = (f"name it with {argument('image_column')} (vltools convert hf): an Image column, or text columns "
                 "joined as the image's path")
    if image:
        for column in image:
            _given(part, column, "images", "image_column")
        if len(image) > 1 or not _is_image(types[image[0]]):
            for column in image:
                if not _is_text(types[column]):
                    raise _wrong_type(part, column, "an Image (a struct {bytes, path}) or a text path", fix_image)
    else:
        found = [name for name, arrow_type in types.items() if _is_image(arrow_type)]
        if found:
            image = ("image",) if "image" in found else (found[0],)
        elif all(name in types and _is_text(types[name]) for name in KARPATHY_PATH):
            image = KARPATHY_PATH
        else:
            raise input_error(part.name, None, "no image column (an Image feature, or Karpathy's filepath and "
                              f"filename); its columns are {', '.join(types)}", fix_image)
    if caption is not None:
        _given(part, caption, "captions", "caption_column")
    elif captions:
        caption = next((name for name in CAPTION_COLUMNS if name in types), None)
        if caption is None:
            raise input_error(part.name, None, f"no caption column ({', '.join(CAPTION_COLUMNS)}); its columns are "
                              f"{', '.join(types)}", f"give {argument('caption_column')}")
    if caption is not None and not _is_caption(types[caption]):
        raise _wrong_type(part, caption, "a caption text, a list of texts or Karpathy sentences {raw}",
                          f"give {argument('caption_column')} the column of caption texts")
    if id is not None:
        _given(part, id, "image ids", "id_column")
    else:
        id = next((name for name in ID_COLUMNS if name in types and _is_id(types[name])), None)
    if id is not None and not _is_id(types[id]):
        raise _wrong_type(part, id, "a text or an integer id", f"give {argument('id_column')} a column of ids")
    if split is not None:
        _given(part, split, "splits", "split_column")
    elif SPLIT_COLUMN in types:
        split = SPLIT_COLUMN
    if split is not None and not _is_text(types[split]):
        raise _wrong_type(part, split, "a split name", f"give {argument('split_column')} a text column")
    return Columns(tuple(image), caption, id, split)


@dataclass(frozen=True)
class ImageCell:
    """Where one row's image is: `part`, `row`, the image `columns` (see Columns.image) and the folder a relative
    path is under. Small and picklable: DataLoader workers read the image by it."""

    part: Part
    row: int
    columns: tuple[str, ...]
    root: Path

    @property
    def where(self) -> str:
        """The row and column, for messages."""
        return f"row {self.row}, column {'/'.join(self.columns)!r}"


def image_source(image: ImageCell) -> bytes | Path:
    """The image of a row: an Image value's bytes, else its path, else the row's path columns joined (a relative
    path under the cell's root). Raises ValueError when the row holds none."""
    values = [cell(image.part, image.row, column) for column in image.columns]
    if len(values) == 1 and isinstance(values[0], dict):
        if values[0].get("bytes"):
            return values[0]["bytes"]
        values = [values[0].get("path")]
    if any(not isinstance(value, str) or not value for value in values):
        raise ValueError("no image in this row (neither bytes nor a path)")
    path = Path(*values)
    return path if path.is_absolute() else image.root / path


@dataclass(frozen=True)
class Row:
    """One image-caption row: its image id, split (None: none), captions and their ids (None: none given), and
    its image."""

    image_id: str
    split: str | None
    captions: tuple[str, ...]
    caption_ids: tuple[str | None, ...]
    image: ImageCell


def _text(value: object, part: Part, row: int, column: str) -> str:
    """A caption's text (a str, or a sentence struct's `raw`), stripped; an empty one is an error."""
    text = value.get("raw") if isinstance(value, dict) else value
    if not isinstance(text, str) or not text.strip():
        raise input_error(part.name, f"row {row}, column {column!r}", "an empty caption",
                          "fix or drop that row")
    return text.strip()


def _captions(value: object, sentids: object, part: Part, row: int,
              column: str) -> tuple[tuple[str, ...], tuple[str | None, ...]]:
    """A row's caption texts and ids: the sentence structs' `sentid`, else the `sentids` list holding one per
    caption, else None each."""
    if value is None:
        raise input_error(part.name, f"row {row}, column {column!r}", "no caption (null)", "fix or drop that row")
    values = value if isinstance(value, list) else [value]
    texts = tuple(_text(item, part, row, column) for item in values)
    if all(isinstance(item, dict) and item.get("sentid") is not None for item in values) and values:
        return texts, tuple(str(item["sentid"]) for item in values)
    if isinstance(sentids, list) and len(sentids) == len(texts) and all(s is not None for s in sentids):
        return texts, tuple(str(s) for s in sentids)
    return texts, (None,) * len(texts)


def _id(value: object, part: Part, row: int, column: str) -> str:
    if value is None or (isinstance(value, str) and not value.strip()):
        raise input_error(part.name, f"row {row}, column {column!r}", "no image id", "give every row its id")
    text = str(value)
    if (problem := id_problem(text)) is not None:
        raise input_error(part.name, f"row {row}, column {column!r}", f"the id {problem}, which an id cannot",
                          f"fix that row, or give {argument('id_column')} another column")
    return text


def dataset_rows(path: str | os.PathLike, image: Sequence[str] = (), caption: str | None = None,
                 id: str | None = None, split: str | None = None, image_root: str | os.PathLike | None = None,
                 captions: bool = True) -> Iterator[Row]:
    """The rows of the dataset at `path`, in order, read by `columns` (captions only when `captions`); a relative
    image path is under `image_root` (default: the dataset's folder, a parquet file's folder)."""
    number = 0
    for part in dataset_parts(path):
        chosen = columns(part, image, caption, id, split, captions)
        count = row_count(part)
        root = Path(image_root) if image_root is not None else part.source.parent if part.parquet else part.source
        ids = column_values(part, chosen.id) if chosen.id else [str(number + row) for row in range(count)]
        splits = column_values(part, chosen.split) if chosen.split else [part.split] * count
        texts = column_values(part, chosen.caption) if chosen.caption else [None] * count
        sentids = column_values(part, SENTIDS) if chosen.caption and SENTIDS in schema(part).names else [None] * count
        for row in range(count):
            if chosen.split and (not isinstance(splits[row], str) or not splits[row].strip()):
                raise input_error(part.name, f"row {row}, column {chosen.split!r}", "no split",
                                  "give every row its split")
            found = (_captions(texts[row], sentids[row], part, row, chosen.caption) if chosen.caption
                     else ((), ()))
            yield Row(_id(ids[row], part, row, chosen.id) if chosen.id else ids[row], splits[row], *found,
                      ImageCell(part, row, chosen.image, root))
        number += count
