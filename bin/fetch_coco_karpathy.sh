#!/usr/bin/env bash
# Fetch what examples/cl's real recipe needs: Karpathy's COCO split file (dataset_coco.json) and the COCO 2014
# train and val images.
#
# Usage: bin/fetch_coco_karpathy.sh [DEST]        (default DEST: data/coco)
# Result: DEST/dataset_coco.json, DEST/train2014/*.jpg, DEST/val2014/*.jpg   (about 19 GB)
# Then:   make -C examples/cl DATA=$PWD/DEST DEVICE=cuda table
#
# Sources: Karpathy's caption_datasets.zip (cs.stanford.edu/people/karpathy/deepimagesent/, the file neuraltalk2 and
# ImageCaptioning.pytorch use) and the COCO 2014 image archives (images.cocodataset.org).
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

DEST=${1:-data/coco}
KARPATHY=${KARPATHY_URL:-https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip}
COCO=${COCO_URL:-http://images.cocodataset.org/zips}

offline() {
    cat >&2 <<MSG
fetch_coco_karpathy.sh: $1; on a connected machine download
  ${KARPATHY} -> ${DEST}/caption_datasets.zip
  ${COCO}/train2014.zip -> ${DEST}/train2014.zip
  ${COCO}/val2014.zip -> ${DEST}/val2014.zip
put them there and rerun this script: it unpacks dataset_coco.json, train2014/ and val2014/ in ${DEST}/.
MSG
    exit 1
}

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    offline "VLTOOLS_OFFLINE=1: no download"
fi
for tool in curl unzip; do
    command -v "$tool" > /dev/null || { echo "fetch_coco_karpathy.sh: needs $tool; install it first" >&2; exit 1; }
done

mkdir -p "$DEST"
for url in "$KARPATHY" "$COCO/train2014.zip" "$COCO/val2014.zip"; do
    file="$DEST/$(basename "$url")"
    if [[ ! -s "$file" ]]; then
        curl -fL --connect-timeout 20 -o "$file.part" "$url" \
            || { rm -f "$file.part"; offline "cannot download $url (no network or the host is down)"; }
        mv "$file.part" "$file"
    fi
done
unzip -n -j "$DEST/caption_datasets.zip" dataset_coco.json -d "$DEST"
unzip -n -q "$DEST/train2014.zip" -d "$DEST"
unzip -n -q "$DEST/val2014.zip" -d "$DEST"
echo "fetch_coco_karpathy.sh: ready: $DEST (make -C examples/cl DATA=$(realpath "$DEST") DEVICE=cuda table)" >&2
