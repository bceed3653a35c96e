#!/usr/bin/env bash
# Data for SCO's real recipe (examples/sco): Karpathy's splits (dataset_{flickr30k,coco}.json) and the raw images.
# Usage: bin/fetch_sco_data.sh [f30k|coco] DEST      (default: f30k)
#   DEST/dataset_<name>.json and DEST/images/ (COCO: images/train2014, images/val2014; ids are train2014/<file>)
# Flickr30K's images are given out by its authors after a request form, so for f30k the script fetches the
# splits and says where to put the images. Offline, it stops with one sentence naming the file it could not get.
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail
if [[ $# -eq 1 ]]; then
    set -- f30k "$1"
fi
if [[ $# -ne 2 || ! $1 =~ ^(f30k|coco)$ ]]; then
    echo "usage: $0 [f30k|coco] DEST" >&2
    exit 2
fi
NAME=$1
DEST=$2
SPLITS=https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip
COCO=http://images.cocodataset.org/zips
F30K_IMAGES=https://shannon.cs.illinois.edu/DenotationGraph/

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    {
        echo "fetch_sco_data.sh: VLTOOLS_OFFLINE=1: no download; on a connected machine download"
        echo "  $SPLITS -> $DEST/caption_datasets.zip"
        if [[ $NAME == coco ]]; then
            echo "  $COCO/train2014.zip -> $DEST/train2014.zip"
            echo "  $COCO/val2014.zip -> $DEST/val2014.zip"
        else
            echo "  Flickr30K images (after a request form at $F30K_IMAGES): flickr30k-images/*.jpg -> $DEST/images/"
        fi
        echo "put them there and rerun this script: it unpacks them in $DEST/."
    } >&2
    exit 1
fi

fetch() {  # URL FILE
    if ! mkdir -p "$(dirname "$2")" ||
            ! curl -fsL --connect-timeout 20 -o "$2.part" "$1"; then
        rm -f "$2.part"
        echo "fetch_sco_data.sh: cannot download $1 (no network?); download it elsewhere and put it at $2" >&2
        exit 1
    fi
    mv "$2.part" "$2"
}

json=dataset_$([[ $NAME == f30k ]] && echo flickr30k || echo coco).json
if [[ ! -f $DEST/$json ]]; then
    [[ -f $DEST/caption_datasets.zip ]] || fetch "$SPLITS" "$DEST/caption_datasets.zip"
    unzip -o -q "$DEST/caption_datasets.zip" "$json" -d "$DEST"
fi
if [[ $NAME == coco ]]; then
    for part in train2014 val2014; do
        if [[ ! -d $DEST/images/$part ]]; then
            [[ -f $DEST/$part.zip ]] || fetch "$COCO/$part.zip" "$DEST/$part.zip"
            unzip -q "$DEST/$part.zip" -d "$DEST/images"
        fi
    done
elif [[ ! -d $DEST/images || -z $(ls -A "$DEST/images") ]]; then
    echo "fetch_sco_data.sh: Flickr30K images come from $F30K_IMAGES after a" \
         "request; unpack flickr30k-images/*.jpg into $DEST/images/" >&2
    exit 1
fi
echo "SCO data ready in $DEST: make -C examples/sco DATA=$DEST table" >&2
