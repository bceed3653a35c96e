"""The most-frequent-caption baseline: the training split's most common caption (after Karpathy preprocessing),
given to every image of the test split, as captions JSONL on stdout.

Usage: python most_frequent.py CAPTIONS.jsonl [TRAIN_SPLIT [TEST_SPLIT]]
"""

from __future__ import annotations

import json
import sys
from collections import Counter

from vltools.io.records import read_records
from vltools.text.captions import CaptionPreprocessing


def main(argv: list[str]) -> None:
    path, train, test = (argv + ["train", "test"][len(argv) - 1:])[:3]
    records = read_records(path, "captions")
    prep = CaptionPreprocessing()
    counts = Counter(" ".join(prep.words(r["caption"])) for r in records if r.get("split") == train)
    caption = counts.most_common(1)[0][0]
    for image_id in dict.fromkeys(r["image_id"] for r in records if r.get("split") == test):
        print(json.dumps({"image_id": image_id, "caption": caption}))


if __name__ == "__main__":
    main(sys.argv[1:])
