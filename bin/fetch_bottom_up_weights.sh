#!/usr/bin/env bash
# Fetch the released bottom-up-attention detector (Anderson et al. 2018: Faster R-CNN ResNet-101, Visual Genome
# 1600 objects + 400 attributes; the Caffe weights as converted to PyTorch by MILVLG/bottom-up-attention.pytorch)
# and convert it to a vltools checkpoint (`vltools convert bottom-up-weights FILE --trust -o DEST/bua.pt`), the
# weights of `vltools extract-regions --regions bottom-up`.
#
# Usage: bin/fetch_bottom_up_weights.sh [--fixed36] [DEST]     (default DEST: models/)
#   default:   the "10-100 boxes" model, bua-caffe-frcn-r101-k10-100.pth (Caffe resnet101_faster_rcnn_final)
#   --fixed36: the "36 boxes" model, bua-caffe-frcn-r101-k36.pth (Caffe ..._final_iter_320000)
# Result: DEST/bua.pt (DEST/bua-k36.pt with --fixed36), registered in the model store as `bottom-up`
# (`bottom-up-k36`), the names `extract-regions --regions bottom-up --detector-weights NAME` accepts.
#
# Sources (the bottom-up-attention.pytorch README, "Pre-trained models", R101-k10-100 and R101-k36):
#   https://awma1-my.sharepoint.com/:u:/g/personal/yuz_l0_tn/EaXvCC3WjtlLvvEfLr3oa8UBLA21tcLh4L8YLbYXl6jgjg?download=1
#   https://awma1-my.sharepoint.com/:u:/g/personal/yuz_l0_tn/EUKhQ3hSRv9JrrW64qpNLSIBGoOjEGCkF8zvgBP9gKax-w?download=1
# A file put at DEST/<name>.pth by hand is converted without any download.
# VLTOOLS_OFFLINE=1: touch no network; say what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

SHAREPOINT="https://awma1-my.sharepoint.com/:u:/g/personal/yuz_l0_tn"
NAME=bua-caffe-frcn-r101-k10-100.pth
URL="$SHAREPOINT/EaXvCC3WjtlLvvEfLr3oa8UBLA21tcLh4L8YLbYXl6jgjg?download=1"
OUTPUT=bua.pt
STORE_NAME=bottom-up
if [[ "${1:-}" == "--fixed36" ]]; then
    NAME=bua-caffe-frcn-r101-k36.pth
    URL="$SHAREPOINT/EUKhQ3hSRv9JrrW64qpNLSIBGoOjEGCkF8zvgBP9gKax-w?download=1"
    OUTPUT=bua-k36.pt
    STORE_NAME=bottom-up-k36
    shift
fi
DEST=${1:-models}
VLTOOLS=${VLTOOLS:-vltools}
FILE="$DEST/$NAME"

offline() {
    echo "fetch_bottom_up_weights.sh: $1; on a connected machine download ${URL} (MILVLG's conversion of the" \
         "released Caffe detector) and put it at ${FILE}, then rerun this script, which converts it to" \
         "${DEST}/${OUTPUT}." >&2
    exit 1
}

if [[ ! -f "$FILE" ]]; then
    if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
        offline "VLTOOLS_OFFLINE=1: no download"
    fi
    if command -v curl > /dev/null; then
        probe() { curl --silent --head --max-time 10 "$SHAREPOINT" > /dev/null; }
        fetch() { curl --fail --location --output "$2" "$1"; }
    elif command -v wget > /dev/null; then
        probe() { wget --quiet --spider --timeout=10 --tries=1 "$SHAREPOINT" 2> /dev/null || [[ $? -eq 8 ]]; }
        fetch() { wget --output-document="$2" "$1"; }
    else
        offline "needs curl or wget to download"
    fi
    probe || offline "cannot reach awma1-my.sharepoint.com (no network or the host is down)"
    mkdir -p "$DEST"
    echo "fetch_bottom_up_weights.sh: downloading $NAME" >&2
    fetch "$URL" "$FILE.part" || offline "the download failed"
    if head -c 256 "$FILE.part" | grep -qiE '<(!doctype|html)'; then
        rm -f "$FILE.part"
        offline "the server sent a web page instead of the weights (the link may need a browser)"
    fi
    mv "$FILE.part" "$FILE"
fi
# the released file is loaded once here with pickle allowed (--trust); the vltools checkpoint it becomes is not a pickle
"$VLTOOLS" convert bottom-up-weights "$FILE" --trust -o "$DEST/$OUTPUT"
echo "fetch_bottom_up_weights.sh: wrote $DEST/$OUTPUT" >&2
"$VLTOOLS" models add --replace "$STORE_NAME" "$DEST/$OUTPUT"
