#!/usr/bin/env bash
# Fetch the data of L2C's recipe (examples/l2c): the Birds-to-Words TSV and its iNaturalist images, and
# CUB-200-2011 (images, images.txt, segmentations) with Reed et al.'s ten captions per image (text_c10) and
# the zero-shot class splits (trainvalclasses.txt = 150 classes, testclasses.txt = 50).
#
# Usage: bin/fetch_l2c_data.sh [DEST]       (default DEST: data/l2c)
# Result: DEST/birds-to-words-v1.0.tsv, DEST/b2w_images/photos/<id>/medium.jpg, DEST/CUB_200_2011/...,
#         DEST/segmentations/<class>/<image>.png, DEST/text_c10/<class>/<image>.txt, DEST/{trainval,test}classes.txt
# Then:   make -C examples/l2c DATA=$PWD/DEST table
#
# Sources: github.com/google-research-datasets/birds-to-words (TSV; images from the static.inaturalist.org URLs in
# it), data.caltech.edu/records/65de6-vh78 (CUB_200_2011.tgz, segmentations.tgz), github.com/reedscot/cvpr2016
# (cvpr2016_cub.tar.gz: text_c10 and the class splits; a Google Drive link in its README).
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

DEST=${1:-data/l2c}
B2W_TSV=${B2W_TSV_URL:-https://raw.githubusercontent.com/google-research-datasets/birds-to-words/master/birds-to-words-v1.0.tsv}
CUB=${CUB_URL:-https://data.caltech.edu/records/65de6-vh78/files}
REED=${REED_CUB_TEXT:-$DEST/cvpr2016_cub.tar.gz}

offline() {
    cat >&2 <<MSG
fetch_l2c_data.sh: $1; on a connected machine download
  $B2W_TSV -> $DEST/birds-to-words-v1.0.tsv
  $CUB/CUB_200_2011.tgz -> $DEST/CUB_200_2011.tgz
  $CUB/segmentations.tgz -> $DEST/segmentations.tgz
  cvpr2016_cub.tar.gz (Google Drive link in https://github.com/reedscot/cvpr2016) -> $REED
put them there and rerun this script: it unpacks them in $DEST/. The Birds-to-Words images (the
static.inaturalist.org URLs in columns 2 and 6 of the TSV) go to $DEST/b2w_images/<URL path>, which the rerun
downloads (it needs the network for them).
MSG
    exit 1
}

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    offline "VLTOOLS_OFFLINE=1: no download"
fi
command -v curl > /dev/null || { echo "fetch_l2c_data.sh: needs curl; install it first" >&2; exit 1; }
probe() { curl --silent --head --fail --location --max-time 10 "$1" > /dev/null; }
fetch() {  # URL FILE
    [[ -s "$2" ]] && return
    probe "$1" || offline "cannot reach $1 (no network or the host is down)"
    curl --fail --location --output "$2.part" "$1" && mv "$2.part" "$2"
}

mkdir -p "$DEST"
fetch "$B2W_TSV" "$DEST/birds-to-words-v1.0.tsv"
fetch "$CUB/CUB_200_2011.tgz" "$DEST/CUB_200_2011.tgz"
fetch "$CUB/segmentations.tgz" "$DEST/segmentations.tgz"
[[ -d "$DEST/CUB_200_2011" ]] || tar -xzf "$DEST/CUB_200_2011.tgz" -C "$DEST"
[[ -d "$DEST/segmentations" ]] || tar -xzf "$DEST/segmentations.tgz" -C "$DEST"
if [[ ! -d "$DEST/text_c10" ]]; then
    [[ -f "$REED" ]] || { echo "fetch_l2c_data.sh: put cvpr2016_cub.tar.gz (github.com/reedscot/cvpr2016, Google" \
        "Drive) at $REED and rerun" >&2; exit 1; }
    tar -xzf "$REED" -C "$DEST"
    cp "$DEST"/cvpr2016_cub/text_c10 "$DEST"/ -r
    cp "$DEST"/cvpr2016_cub/{trainvalclasses,testclasses}.txt "$DEST"/
fi
# Birds-to-Words images: column 2 (img1ImgURL) and 6 (img2ImgURL), saved under their URL path
tail -n +2 "$DEST/birds-to-words-v1.0.tsv" | cut -f 2,6 | tr '\t' '\n' | sort -u | while read -r url; do
    path="$DEST/b2w_images/${url#*://*/}"
    [[ -s "$path" ]] && continue
    mkdir -p "$(dirname "$path")"
    curl --silent --fail --location --max-time 60 --output "$path" "$url" || echo "fetch_l2c_data.sh: failed $url" >&2
done
echo "fetch_l2c_data.sh: done; run make -C examples/l2c DATA=$(realpath "$DEST") table" >&2
