#!/usr/bin/env bash
# Fetch Visual Genome v1.2 for examples/semantic's real recipe (Gordo & Larlus): the images, the region
# descriptions (the text proxy), the objects (Table 1's objects proxy) and image_data.json (ids, URLs, sizes).
#
# Usage: bin/fetch_visual_genome.sh [DEST]      (default DEST: data/visual_genome)
# Result: DEST/VG_100K/<id>.jpg, DEST/VG_100K_2/<id>.jpg, DEST/region_descriptions.json, DEST/objects.json,
#         DEST/image_data.json   (about 15 GB of images; the JSON files about 2 GB unpacked)
# Then:   make -C examples/semantic DATA=$PWD/DEST table
#
# Sources (the dataset's download page, https://homes.cs.washington.edu/~ranjay/visualgenome/api.html, v1.2):
#   https://cs.stanford.edu/people/rak248/VG_100K_2/images.zip     (unpacks to VG_100K/)
#   https://cs.stanford.edu/people/rak248/VG_100K_2/images2.zip    (unpacks to VG_100K_2/)
#   https://homes.cs.washington.edu/~ranjay/visualgenome/data/dataset/{region_descriptions,objects,image_data}.json.zip
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail

DEST=${1:-data/visual_genome}
IMAGES=${VG_IMAGES_URL:-https://cs.stanford.edu/people/rak248/VG_100K_2}
JSON=${VG_JSON_URL:-https://homes.cs.washington.edu/~ranjay/visualgenome/data/dataset}
# archive URL, and what it leaves in DEST once unpacked
URLS=("$IMAGES/images.zip" "$IMAGES/images2.zip" "$JSON/region_descriptions.json.zip" "$JSON/objects.json.zip"
      "$JSON/image_data.json.zip")
RESULTS=(VG_100K VG_100K_2 region_descriptions.json objects.json image_data.json)

offline() {
    {
        echo "fetch_visual_genome.sh: $1; on a connected machine download"
        for url in "${URLS[@]}"; do
            echo "  $url -> $DEST/$(basename "$url")"
        done
        echo "put them there and rerun this script: it unpacks them into $DEST/{VG_100K,VG_100K_2}/ and" \
             "$DEST/{region_descriptions,objects,image_data}.json."
    } >&2
    exit 1
}

if [[ ${VLTOOLS_OFFLINE:-0} == 1 ]]; then
    offline "VLTOOLS_OFFLINE=1: no download"
fi
command -v unzip > /dev/null || { echo "fetch_visual_genome.sh: needs unzip; install it first" >&2; exit 1; }
if command -v curl > /dev/null; then
    probe() { curl --silent --head --fail --location --max-time 10 "$1" > /dev/null; }
    fetch() { curl --fail --location --continue-at - --output "$2" "$1"; }
elif command -v wget > /dev/null; then
    probe() { wget --quiet --spider --timeout=10 --tries=1 "$1"; }
    fetch() { wget --continue --output-document="$2" "$1"; }
else
    offline "needs curl or wget to download; or fetch the files by hand"
fi

mkdir -p "$DEST"
for i in "${!URLS[@]}"; do
    url=${URLS[$i]}
    file=$(basename "$url")
    result=$DEST/${RESULTS[$i]}
    archive=$DEST/$file
    # done before, or unpacked by hand (no archive beside it)
    if [[ -f "$archive.done" || ( -e "$result" && ! -e "$archive" ) ]]; then
        continue
    fi
    if [[ ! -f "$archive" ]] || ! unzip -tq "$archive" > /dev/null 2>&1; then
        probe "$url" || offline "cannot reach $url (no network or the host is down)"
        echo "fetch_visual_genome.sh: downloading $url (resumable: rerun after an interruption)" >&2
        fetch "$url" "$archive.part"
        mv "$archive.part" "$archive"
    fi
    echo "fetch_visual_genome.sh: unpacking $archive" >&2
    if [[ $file == *.json.zip ]]; then
        # the JSON file alone, wherever the archive keeps it
        unzip -q -o -j "$archive" "*${RESULTS[$i]}" -d "$DEST"
    else
        unzip -q -n "$archive" -d "$DEST"
    fi
    [[ -e "$result" ]] || { echo "fetch_visual_genome.sh: $archive did not give $result" >&2; exit 1; }
    touch "$archive.done"
done
echo "fetch_visual_genome.sh: ready: $DEST (make -C examples/semantic DATA=$(realpath "$DEST") table)" >&2
