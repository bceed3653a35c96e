#!/usr/bin/env bash
# Fetch and unpack the public precomputed Flickr30K and MS-COCO region features (bottom-up attention,
# 36 x 2048 per image, Karpathy splits) and vocabularies that SCAN, VSE++ and SGRAF train on.
#
# Usage: bin/fetch_precomp.sh [DEST]        (default DEST: data/)
# Result: DEST/data/f30k_precomp/{train,dev,test}_{ims.npy,caps.txt}, DEST/data/coco_precomp/...,
#         DEST/vocab/{f30k,coco}_precomp_vocab.json
# Then:   make -C examples/sgraf DATA=$PWD/DEST/data/f30k_precomp VOCAB=$PWD/DEST/vocab/f30k_precomp_vocab.json table
#
# Sources (the SGRAF README, github.com/Paranioar/SGRAF, "Download data and vocab"; the same files as the SCAN
# README, github.com/kuanghuei/SCAN, whose older scanproject.blob.core.windows.net links are offline):
#   https://iudata.blob.core.windows.net/scan/data.zip    (tens of GB: both datasets' features)
#   https://iudata.blob.core.windows.net/scan/vocab.zip
#   mirror: https://drive.google.com/drive/u/0/folders/1os1Kr7HeTbh8FajBNegW8rjJf6GIhFqC
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

DEST=${1:-data}
BASE=${SCAN_DATA_URL:-https://iudata.blob.core.windows.net/scan}
FILES=(data.zip vocab.zip)

offline() {
    cat >&2 <<EOF
fetch_precomp.sh: cannot reach ${BASE} (no network or the host is down); on a connected machine download
  ${BASE}/data.zip and ${BASE}/vocab.zip
  (or the same files from https://drive.google.com/drive/u/0/folders/1os1Kr7HeTbh8FajBNegW8rjJf6GIhFqC),
put them in ${DEST}/ and rerun this script: it unpacks them into ${DEST}/data/{f30k,coco}_precomp and ${DEST}/vocab.
EOF
    exit 1
}

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    offline
fi
for tool in unzip; do
    command -v "$tool" > /dev/null || { echo "fetch_precomp.sh: needs $tool; install it first" >&2; exit 1; }
done
if command -v curl > /dev/null; then
    probe() { curl --silent --head --fail --max-time 10 "$1" > /dev/null; }
    fetch() { curl --fail --location --continue-at - --output "$2" "$1"; }
elif command -v wget > /dev/null; then
    probe() { wget --quiet --spider --timeout=10 --tries=1 "$1"; }
    fetch() { wget --continue --output-document="$2" "$1"; }
else
    echo "fetch_precomp.sh: needs curl or wget to download; or fetch the files by hand:" >&2
    offline
fi

mkdir -p "$DEST"
for file in "${FILES[@]}"; do
    if [[ -f "$DEST/$file.done" ]]; then
        continue
    fi
    if [[ ! -f "$DEST/$file" ]] || ! unzip -tq "$DEST/$file" > /dev/null 2>&1; then
        probe "$BASE/$file" || offline
        echo "fetch_precomp.sh: downloading $BASE/$file (resumable: rerun after an interruption)" >&2
        fetch "$BASE/$file" "$DEST/$file.part"
        mv "$DEST/$file.part" "$DEST/$file"
    fi
    echo "fetch_precomp.sh: unpacking $DEST/$file" >&2
    unzip -q -o "$DEST/$file" -d "$DEST"
    touch "$DEST/$file.done"
done
echo "fetch_precomp.sh: done; precomp folders:" >&2
find "$DEST" -maxdepth 2 -type d -name '*_precomp' >&2
