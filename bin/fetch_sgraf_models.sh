#!/usr/bin/env bash
# Fetch the authors' released SGRAF checkpoints (Flickr30K and MS-COCO, SGR and SAF each), convert them to
# vltools checkpoints (`vltools convert sgraf-checkpoint --trust`: they are pickles, loaded once here) and
# register them in the local model store (`vltools models`), so that `vltools match --model sgraf ...` works.
# Also installs NLTK's punkt sentence model, which the released tokenisation (nltk.word_tokenize) uses.
#
# Usage: bin/fetch_sgraf_models.sh [--default f30k|coco] [DEST]     (default DEST: models/, default f30k)
# Needs: the released vocabularies, DEST/../vocab or $VOCAB_DIR holding {f30k,coco}_precomp_vocab.json
#        (bin/fetch_precomp.sh DIR puts them in DIR/vocab; default VOCAB_DIR: data/vocab).
# Registers: sgr-f30k saf-f30k sgraf-f30k (= SGR + SAF), sgr-coco saf-coco sgraf-coco, and sgraf = the
#            --default dataset's ensemble. Model store folder: $VLTOOLS_MODELS (default ~/.local/share/vltools/models).
#
# Sources (the SGRAF README, github.com/Paranioar/SGRAF, "Pre-trained models and evaluation"):
#   Flickr30K_SGRAF.zip  https://drive.google.com/file/d/1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj/view
#   MSCOCO_SGRAF.zip     https://drive.google.com/file/d/1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag/view
# Each archive holds an SGR and an SAF folder with model_best.pth.tar (and the training logs).
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

DEFAULT=f30k
if [[ "${1:-}" == "--default" ]]; then
    DEFAULT=${2:?--default needs f30k or coco}
    shift 2
fi
[[ "$DEFAULT" == f30k || "$DEFAULT" == coco ]] || { echo "fetch_sgraf_models.sh: --default must be f30k or coco" >&2; exit 2; }
DEST=${1:-models}
VOCAB_DIR=${VOCAB_DIR:-data/vocab}
VLTOOLS=${VLTOOLS:-vltools}
declare -A IDS=([f30k]=1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj [coco]=1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag)
declare -A ARCHIVES=([f30k]=Flickr30K_SGRAF.zip [coco]=MSCOCO_SGRAF.zip)
URL="https://drive.usercontent.google.com/download?export=download&confirm=t&id="

offline() {
    cat >&2 <<EOF
fetch_sgraf_models.sh: $1; on a connected machine download
  https://drive.google.com/file/d/${IDS[f30k]}/view -> ${DEST}/Flickr30K_SGRAF.zip
  https://drive.google.com/file/d/${IDS[coco]}/view -> ${DEST}/MSCOCO_SGRAF.zip
put them there and rerun this script: it unpacks, converts and registers them. For the punkt tokenizer, run
python -m nltk.downloader punkt_tab there and copy ~/nltk_data here.
EOF
    exit 1
}

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    offline "VLTOOLS_OFFLINE=1: no download"
fi
command -v unzip > /dev/null || { echo "fetch_sgraf_models.sh: needs unzip; install it first" >&2; exit 1; }
if command -v curl > /dev/null; then
    probe() { curl --silent --head --fail --max-time 10 "https://drive.google.com" > /dev/null; }
    fetch() { curl --fail --location --output "$2" "$1"; }
elif command -v wget > /dev/null; then
    probe() { wget --quiet --spider --timeout=10 --tries=1 "https://drive.google.com"; }
    fetch() { wget --output-document="$2" "$1"; }
else
    offline "needs curl or wget to download; or fetch the files by hand"
fi

mkdir -p "$DEST"
for data in f30k coco; do
    archive="$DEST/${ARCHIVES[$data]}"
    if [[ ! -f "$archive" ]] || ! unzip -tq "$archive" > /dev/null 2>&1; then
        probe || offline "cannot reach drive.google.com (no network or the host is down)"
        echo "fetch_sgraf_models.sh: downloading ${ARCHIVES[$data]}" >&2
        fetch "$URL${IDS[$data]}" "$archive.part"
        mv "$archive.part" "$archive"
    fi
    unpacked="$DEST/$data"
    mkdir -p "$unpacked"
    unzip -q -o "$archive" -d "$unpacked"
    vocab="$VOCAB_DIR/${data}_precomp_vocab.json"
    [[ -f "$vocab" ]] || { echo "fetch_sgraf_models.sh: $vocab not found; run bin/fetch_precomp.sh first or set VOCAB_DIR" >&2; exit 1; }
    for module in SGR SAF; do
        found=$(find "$unpacked" -path "*${module}*" -name 'model_best.pth.tar' | head -n 1)
        [[ -n "$found" ]] || { echo "fetch_sgraf_models.sh: no ${module}/model_best.pth.tar in $archive" >&2; exit 1; }
        name="${module,,}-$data"
        "$VLTOOLS" convert sgraf-checkpoint "$found" --vocab "$vocab" --trust -o "$DEST/$name.pt"
        "$VLTOOLS" models add --replace "$name" "$DEST/$name.pt"
    done
    "$VLTOOLS" models add --replace "sgraf-$data" "$DEST/sgr-$data.pt" "$DEST/saf-$data.pt"
done
"$VLTOOLS" models add --replace sgraf "$DEST/sgr-$DEFAULT.pt" "$DEST/saf-$DEFAULT.pt"
"${PYTHON:-python3}" -m nltk.downloader -q punkt_tab \
    || echo "fetch_sgraf_models.sh: could not install NLTK's punkt_tab; the offline sentence rule will be used" >&2
"$VLTOOLS" models list
