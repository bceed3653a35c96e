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
set -euo pipefail

DEST=${1:-data/coco}
KARPATHY=${KARPATHY_URL:-https://cs.stanford.edu/people/karpathy/deepimagesent/caption_datasets.zip}
COCO=${COCO_URL:-http://images.cocodataset.org/zips}

offline() {
    cat >&2 <<MSG
fetch_coco_karpathy.sh: cannot download $1 (no network or the host is down); on a connected machine download
  ${KARPATHY}, ${COCO}/train2014.zip and ${COCO}/val2014.zip,
put them in ${DEST}/ and rerun this script: it unpacks dataset_coco.json, train2014/ and val2014/ there.
MSG
    exit 1
}

mkdir -p "$DEST"
for url in "$KARPATHY" "$COCO/train2014.zip" "$COCO/val2014.zip"; do
    file="$DEST/$(basename "$url")"
    if [[ ! -s "$file" ]]; then
        curl -fL --connect-timeout 20 -o "$file.part" "$url" || offline "$url"
        mv "$file.part" "$file"
    fi
done
unzip -n -j "$DEST/caption_datasets.zip" dataset_coco.json -d "$DEST"
unzip -n -q "$DEST/train2014.zip" -d "$DEST"
unzip -n -q "$DEST/val2014.zip" -d "$DEST"
echo "fetch_coco_karpathy.sh: ready: $DEST (make -C examples/cl DATA=$(realpath "$DEST") DEVICE=cuda table)" >&2
