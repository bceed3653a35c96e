#!/usr/bin/env bash
# The five papers' tables on the synthetic world: builds the world, then runs each paper's pipeline on it and
# prints its table. Usage: examples/tables.sh OUT_DIR   (`make tables` runs it with OUT_DIR=out/tables and the
# venv on PATH; `make demo` is the five-minute first look, examples/demo/demo.sh)
# Each pipeline has its own section below: it reads the world in $WORLD, writes under $OUT_DIR/<pipeline>/,
# and prints its table (vltools' numbers beside chance and the cheap baselines). Numbers on this toy world
# prove the machinery, not the papers.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
OUT_DIR=$1
WORLD="$OUT_DIR/world"
mkdir -p "$OUT_DIR"

# Sections that run two make jobs at once give each job one thread (OMP_NUM_THREADS=1): two jobs of two threads
# each on a 2-core CPU oversubscribe it, and OpenMP's waiting threads then cost more than the second job gains.
section() {
    printf '\n==== %s ====\n' "$1"
}

count_files() {
    find "$1" -maxdepth 1 -name '*.png' | wc -l | tr -d ' '
}

# ---------------------------------------------------------------------------------------------------------
# World: `vltools synth` (deterministic; --force replaces the world of an earlier run, nothing else)
# ---------------------------------------------------------------------------------------------------------
section "synthetic world: $WORLD"
vltools synth "$WORLD" --seed 0 --force
vltools inspect "$WORLD"/images.jsonl "$WORLD"/captions.jsonl "$WORLD"/regions.jsonl \
    "$WORLD"/pair_images.jsonl "$WORLD"/pairs.jsonl "$WORLD"/aux_images.jsonl "$WORLD"/aux_captions.jsonl
echo "PNG files: images $(count_files "$WORLD/images"), masks $(count_files "$WORLD/masks")," \
    "pair images $(count_files "$WORLD/pair_images"), aux images $(count_files "$WORLD/aux_images")"
echo "example captions:"
head -n 5 "$WORLD/captions.jsonl"
echo "example pair descriptions:"
head -n 3 "$WORLD/pairs.jsonl" | cut -c 1-240
echo
sed -n '/^WORLD$/,/^FILES/p' "$WORLD/README.txt" | sed '$d'

# ---------------------------------------------------------------------------------------------------------
# SGRAF (image-text matching): synth -> extract-regions (object boxes) -> train SGR, SAF -> match -> score
# ---------------------------------------------------------------------------------------------------------
section "SGRAF, Table 1 layout (examples/sgraf, DATA=synth)"
make --no-print-directory -j2 -C "$(dirname "$0")/sgraf" DATA=synth OUT="$(realpath "$OUT_DIR")/sgraf" PYTHON=python \
    THREADS=1 table

# ---------------------------------------------------------------------------------------------------------
# Report: the SGRAF ensemble's test rankings as an HTML gallery (thumbnails, ground truth, scores, curves)
# ---------------------------------------------------------------------------------------------------------
section "report: $OUT_DIR/report/index.html"
SGRAF_OUT="$OUT_DIR/sgraf"
vltools report "$OUT_DIR/report" --force --title "SGRAF ensemble on the synthetic world (test split)" \
    --rankings "$SGRAF_OUT/sgraf_rankings.jsonl" --images "$SGRAF_OUT/world/images.jsonl" \
    --captions "$SGRAF_OUT/world/captions.jsonl" --scores "$SGRAF_OUT/sgraf.json" \
    --log "$SGRAF_OUT/sgr.pt.log.jsonl" --log "$SGRAF_OUT/saf.pt.log.jsonl" --sample 100
echo "open $OUT_DIR/report/index.html in a browser (it needs no server)"
# Semantic retrieval (Gordo & Larlus): synth -> tfidf-proxy (region captions) -> train rmac (baseline, V, V+T,
# WSABIE; triplets mined every round) -> encode -> match i2i -> score semantic (+ the simulated user study)
# ---------------------------------------------------------------------------------------------------------
section "Semantic retrieval, Tables 1-2 layout (examples/semantic, DATA=synth)"
make --no-print-directory -C "$(dirname "$0")/semantic" DATA=synth OUT="$(realpath "$OUT_DIR")/semantic" PYTHON=python \
    table
# SCO (image-text matching with semantic concepts and order): its own 400-image world -> tencrop context ->
# concepts -> concept CNN -> concept scores -> every Table 1 row and the lambda sweep -> encode -> match -> score
# ---------------------------------------------------------------------------------------------------------
section "SCO, Table 2 and Table 3 layouts (examples/sco, DATA=synth)"
OMP_NUM_THREADS=1 make --no-print-directory -j2 -C "$(dirname "$0")/sco" DATA=synth OUT="$(realpath "$OUT_DIR")/sco" PYTHON=python table
# Contrastive Learning (Dai & Lin, captioning): synth -> extract-regions (grid + global) -> MLE NeuralTalk2 and
# AdaptiveAttention -> IL, CL(P), CL(N), CL, NT/NT, NT/AA, run 2 -> caption -> score caption / self-retrieval
# (shrunk for `make tables`: 400 images, 5 MLE epochs, 1 CL epoch with K = 2 negative sets; two jobs at once, as the
# nine models are mostly independent; see examples/cl/README.md)
# ---------------------------------------------------------------------------------------------------------
section "Contrastive Learning, Tables 1, 4, 5 and 6 layouts (examples/cl, DATA=synth)"
OMP_NUM_THREADS=1 make --no-print-directory -j2 -C "$(dirname "$0")/cl" DATA=synth OUT="$(realpath "$OUT_DIR")/cl" PYTHON=python \
    SYNTH_IMAGES=400 MLE_EPOCHS=5 CL_EPOCHS=1 NEGATIVES=2 table

# ---------------------------------------------------------------------------------------------------------
# L2C (describing visual differences): synth pairs + single-image captions -> segment-pool (mask files) ->
# train every Table 1 / Table 3 row -> caption --pairs -> score caption
# ---------------------------------------------------------------------------------------------------------
section "L2C, Tables 1 and 3 layout (examples/l2c, DATA=synth)"
OMP_NUM_THREADS=1 make --no-print-directory -j2 -C "$(dirname "$0")/l2c" DATA=synth OUT="$(realpath "$OUT_DIR")/l2c" PYTHON=python table
