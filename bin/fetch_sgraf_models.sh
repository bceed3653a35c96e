#!/usr/bin/env bash
# Fetch the authors' released SGRAF checkpoints (Flickr30K and MS-COCO, SGR and SAF each) and the vocabularies
# they were trained with, convert them to vltools checkpoints (`vltools convert sgraf-checkpoint --trust`: they
# are pickles, loaded once here) and register them in the local model store (`vltools models`), so that
# `vltools match --model sgraf ...` works. Also installs NLTK's punkt sentence model, which the released
# tokenisation (nltk.word_tokenize) uses. `vltools models available` lists what each command below downloads.
#
# Usage: bin/fetch_sgraf_models.sh [--only f30k|coco] [--default f30k|coco] [DEST]    (default DEST: models/)
#   --only DATA:    fetch only that dataset's archive (Flickr30K about 140 MB, COCO about 150 MB; both by default)
#   --default DATA: the dataset whose ensemble `sgraf` names (f30k unless --only coco)
# Registers: sgr-f30k saf-f30k sgraf-f30k (= SGR + SAF), sgr-coco saf-coco sgraf-coco, and sgraf = the
#            --default dataset's ensemble. Model store folder: $VLTOOLS_MODELS (default ~/.local/share/vltools/models).
# Vocabularies: DEST/vocab/{f30k,coco}_precomp_vocab.json (or $VOCAB_DIR), fetched from the SGRAF repository
#               (0.3 and 0.4 MB; the same files as in SCAN's vocab.zip, so a copy from bin/fetch_precomp.sh works).
#
# Sources (the SGRAF README, github.com/Paranioar/SGRAF, "Pre-trained models and evaluation"):
#   Flickr30K_SGRAF.zip  https://drive.google.com/file/d/1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj/view
#   MSCOCO_SGRAF.zip     https://drive.google.com/file/d/1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag/view
#   vocabularies         https://raw.githubusercontent.com/Paranioar/SGRAF/<commit>/vocab/{f30k,coco}_precomp_vocab.json
# Each archive holds an SGR and an SAF folder with model_best.pth.tar (and the training logs).
# Files put in place by hand (the archives in DEST, the vocabularies in DEST/vocab) are used without any download.
# VLTOOLS_OFFLINE=1: touch no network; when a file is missing, say what to fetch and where to put it, and exit 1.
set -euo pipefail

usage() { echo "fetch_sgraf_models.sh: $1; usage: bin/fetch_sgraf_models.sh [--only f30k|coco] [--default f30k|coco] [DEST]" >&2; exit 2; }
ONLY=""
DEFAULT=""
while [[ "${1:-}" == --* ]]; do
    case "$1" in
        --only) ONLY=${2:-}; [[ "$ONLY" == f30k || "$ONLY" == coco ]] || usage "--only must be f30k or coco" ;;
        --default) DEFAULT=${2:-}; [[ "$DEFAULT" == f30k || "$DEFAULT" == coco ]] || usage "--default must be f30k or coco" ;;
        *) usage "unknown option $1" ;;
    esac
    shift 2
done
DATASETS=(${ONLY:-f30k coco})
DEFAULT=${DEFAULT:-${ONLY:-f30k}}
[[ -z "$ONLY" || "$DEFAULT" == "$ONLY" ]] || usage "--default $DEFAULT names a dataset that --only $ONLY does not fetch"
DEST=${1:-models}
VOCAB_DIR=${VOCAB_DIR:-$DEST/vocab}
VLTOOLS=${VLTOOLS:-vltools}
declare -A IDS=([f30k]=1OBRIn1-Et49TDu8rk0wgP0wKXlYRk4Uj [coco]=1SpuORBkTte_LqOboTgbYRN5zXhn4M7ag)
declare -A ARCHIVES=([f30k]=Flickr30K_SGRAF.zip [coco]=MSCOCO_SGRAF.zip)
DRIVE="https://drive.usercontent.google.com/download?export=download&confirm=t&id="
# the commit that added the vocabularies (unchanged since, identical on the python3.6 branch of the checkpoints)
VOCAB_URL="https://raw.githubusercontent.com/Paranioar/SGRAF/e21219aa7433f6f164dcb3c3b7b7fb0f5a271c7d/vocab"

# what is missing, as "URL PATH" pairs: what the downloads fetch and what the offline sentence names
MISSING=()
for data in "${DATASETS[@]}"; do
    archive="$DEST/${ARCHIVES[$data]}"
    if [[ ! -f "$archive" ]] || { command -v unzip > /dev/null && ! unzip -tq "$archive" > /dev/null 2>&1; }; then
        MISSING+=("https://drive.google.com/file/d/${IDS[$data]}/view $archive")
    fi
    vocab="$VOCAB_DIR/${data}_precomp_vocab.json"
    [[ -f "$vocab" ]] || MISSING+=("$VOCAB_URL/${data}_precomp_vocab.json $vocab")
done

offline() {
    local list="" pair n=0
    for pair in "${MISSING[@]}"; do
        n=$((n + 1))
        if (( n > 1 && n == ${#MISSING[@]} )); then list+=" and "; elif (( n > 1 )); then list+=", "; fi
        list+="${pair% *} to ${pair#* }"
    done
    echo "fetch_sgraf_models.sh: $1; on a connected machine download ${list}, then rerun this script (it" \
         "unpacks, converts and registers them)." >&2
    exit 1
}

if (( ${#MISSING[@]} )); then
    [[ ${VLTOOLS_OFFLINE:-0} != 1 ]] || offline "VLTOOLS_OFFLINE=1: no download"
    if command -v curl > /dev/null; then
        fetch() { curl --silent --show-error --fail --location --max-time 3600 --output "$2" "$1"; }
    elif command -v wget > /dev/null; then
        fetch() { wget --no-verbose --timeout=30 --tries=1 --output-document="$2" "$1"; }
    else
        offline "needs curl or wget to download"
    fi
    for i in "${!MISSING[@]}"; do
        url=${MISSING[$i]% *}
        target=${MISSING[$i]#* }
        if [[ "$url" == https://drive.google.com/* ]]; then    # the direct download of a shared Drive file
            id=${url#https://drive.google.com/file/d/}
            url="$DRIVE${id%/view}"
        fi
        mkdir -p "$(dirname "$target")"
        echo "fetch_sgraf_models.sh: downloading $target" >&2
        if ! error=$(fetch "$url" "$target.part" 2>&1); then
            rm -f "$target.part"
            error=${error%%$'\n'*}
            offline "could not download $(basename "$target") (${error:-no network, or the host is down})"
        fi
        if [[ "$target" == *.zip ]] && ! unzip -tq "$target.part" > /dev/null 2>&1; then
            rm -f "$target.part"
            offline "the server sent something else than $(basename "$target") (Google Drive may ask for a browser)"
        fi
        mv "$target.part" "$target"
        unset 'MISSING[i]'
    done
fi

command -v unzip > /dev/null || { echo "fetch_sgraf_models.sh: needs unzip; install it first" >&2; exit 1; }
for data in "${DATASETS[@]}"; do
    archive="$DEST/${ARCHIVES[$data]}"
    unpacked="$DEST/$data"
    mkdir -p "$unpacked"
    unzip -q -o "$archive" -d "$unpacked"
    for module in SGR SAF; do
        # in a folder named SGR or ending in _SGR (f30k_SGR; not Flickr30K_SGRAF, which holds both)
        found=""
        while IFS= read -r file; do
            if [[ "/$file" =~ /([^/]*[_-])?${module}/ ]]; then found=$file; break; fi
        done < <(find "$unpacked" -name 'model_best.pth.tar' | sort)
        [[ -n "$found" ]] || { echo "fetch_sgraf_models.sh: no ${module}/model_best.pth.tar in $archive" >&2; exit 1; }
        name="${module,,}-$data"
        "$VLTOOLS" convert sgraf-checkpoint "$found" --vocab "$VOCAB_DIR/${data}_precomp_vocab.json" --trust \
            -o "$DEST/$name.pt"
        "$VLTOOLS" models add --replace "$name" "$DEST/$name.pt"
    done
    "$VLTOOLS" models add --replace "sgraf-$data" "$DEST/sgr-$data.pt" "$DEST/saf-$data.pt"
done
"$VLTOOLS" models add --replace sgraf "$DEST/sgr-$DEFAULT.pt" "$DEST/saf-$DEFAULT.pt"
if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    echo "fetch_sgraf_models.sh: VLTOOLS_OFFLINE=1: NLTK's punkt_tab not installed; the offline sentence rule will" \
         "be used (python -m nltk.downloader punkt_tab installs it)" >&2
else
    "${PYTHON:-python3}" -m nltk.downloader -q punkt_tab \
        || echo "fetch_sgraf_models.sh: could not install NLTK's punkt_tab; the offline sentence rule will be used" >&2
fi
"$VLTOOLS" models list
