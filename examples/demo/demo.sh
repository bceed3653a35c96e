#!/usr/bin/env bash
# The five-minute first look (`make demo`): the headline pipeline of the README on real photos, CPU only, offline.
#
#   synthetic world --extract-regions--> features --train SGR--> sgr.pt --match + score--> test-split recall
#   your photos ----extract-regions (the same extractor)--> features --match sgr.pt + score--> rankings
#   --report--> OUT_DIR/report/index.html
#
# No pretrained weights can be assumed offline, so the extractor is a ResNet-18 trained here on the world's own labels
# (`vltools synth-backbone`: the shape, colour, size and position of each object) over a 3 x 3 grid of cells, and
# the model is a small SGR trained on `vltools synth`'s coloured shapes: it knows only the synthetic world's words.
# The real thing is the same commands with the released SGRAF and bottom-up features (README, "First thing to try");
# the five papers' tables are `make tables`.
#
# Usage: examples/demo/demo.sh OUT_DIR   (`make demo` runs it with OUT_DIR=out/demo and the venv on PATH)
# PHOTOS (a folder of images) and CAPTIONS (their captions JSONL) replace the project's own test photos; the sizes
# below can be shrunk for a quicker look (the tests run it with SYNTH_IMAGES=200 EPOCHS=1 BACKBONE_EPOCHS=1), and
# SYNTH_BACKBONE=random extracts with a randomly initialised ResNet-18 instead of the trained one.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUT_DIR" >&2
    exit 2
fi
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$1
PHOTOS=${PHOTOS:-$(cd "$HERE/../../tests/data/photos" && pwd)}
CAPTIONS=${CAPTIONS:-$HERE/captions.jsonl}
SYNTH_IMAGES=${SYNTH_IMAGES:-600}
EPOCHS=${EPOCHS:-12}
BACKBONE_EPOCHS=${BACKBONE_EPOCHS:-4}
SYNTH_BACKBONE=${SYNTH_BACKBONE:-trained}
case $SYNTH_BACKBONE in
    trained) WEIGHTS=$OUT/synth_resnet18.pt ;;
    random) WEIGHTS=none ;;
    *) echo "$0: SYNTH_BACKBONE=$SYNTH_BACKBONE: use trained or random" >&2; exit 2 ;;
esac
mkdir -p "$OUT"

# one extractor for the world and the photos: the ResNet-18 (trained, or random and seeded, so both runs build the
# same network) over the 3 x 3 grid of its last stage at 96 x 96 pixels, the world's image size (9 regions of 512-d)
EXTRACT=(--regions grid --backbone resnet18 --weights "$WEIGHTS" --seed 0 --image-size 96 --workers 0
         --batch-size 32 --dtype float32)
# a small SGR and a short schedule; the released sizes (1024 / 256 / 300) learn nothing in minutes on a CPU
TRAIN=(--model sgr --epochs "$EPOCHS" --lr-update $((EPOCHS * 3 / 4 > 0 ? EPOCHS * 3 / 4 : 1)) --batch-size 16
       --lr 2e-3 --seed 0 --val-split val --val-every 0
       --set model.num_regions=9 --set model.embed_size=128 --set model.word_dim=64 --set model.sim_dim=32
       --set model.dropout=0.0 --set task.max_violation=false)

step() {
    printf '\n==== %s ====\n' "$1"
}

step "1/5 a synthetic world to train on: $OUT/world"
vltools synth "$OUT/world" --images "$SYNTH_IMAGES" --pairs 0 --aux-images 0 --seed 0 --force
head -n 3 "$OUT/world/captions.jsonl"

step "2/5 its features: a ResNet-18 ($SYNTH_BACKBONE) over a 3 x 3 grid"
if [[ $SYNTH_BACKBONE == trained ]]; then
    vltools synth-backbone "$OUT/world" --epochs "$BACKBONE_EPOCHS" -o "$WEIGHTS"
fi
vltools extract-regions "$OUT/world/images.jsonl" "${EXTRACT[@]}" -o "$OUT/world.h5"

step "3/5 train SGR (Diao et al.'s similarity graph reasoning) for $EPOCHS epochs"
vltools train "${TRAIN[@]}" "$OUT/world.h5" "$OUT/world/captions.jsonl" -o "$OUT/sgr.pt"
vltools match --model "$OUT/sgr.pt" "$OUT/world.h5" "$OUT/world/captions.jsonl" --split test \
    --sims "$OUT/test_sims.h5" -o "$OUT/test_rankings.jsonl"
echo "recall on the world's test split (chance: R@1 $(python -c "
import h5py; n = len(h5py.File('$OUT/test_sims.h5')['image_ids']); print(f'{100 / n:.1f}%, R@10 {1000 / n:.1f}%')")):"
vltools score retrieval "$OUT/test_sims.h5" > "$OUT/test_scores.json"

step "4/5 your photos ($PHOTOS) through the same extractor, matched with their captions"
vltools extract-regions "$PHOTOS" "${EXTRACT[@]}" -o "$OUT/photos.h5"
vltools match --model "$OUT/sgr.pt" "$OUT/photos.h5" "$CAPTIONS" --sims "$OUT/photos_sims.h5" \
    -o "$OUT/photos_rankings.jsonl"
vltools score retrieval "$OUT/photos_sims.h5" > "$OUT/photos_scores.json"
echo "each photo's best caption (a toy model: it knows colours and positions, not cats or rockets):"
python - "$OUT/photos_rankings.jsonl" "$CAPTIONS" <<'EOF'
import sys

from vltools.io.records import caption_ids, read_records

captions = read_records(sys.argv[2], "captions")
texts = dict(zip(caption_ids(captions), (record["caption"] for record in captions), strict=True))
for ranking in read_records(sys.argv[1], "rankings"):
    if ranking["direction"] == "i2t":
        best = ranking["ids"][0]
        mark = "right" if best.startswith(ranking["query"] + "#") else "wrong"
        print(f"  {ranking['query']:<12} -> {texts[best]!r} ({mark})")
EOF

step "5/5 the report"
vltools report "$OUT/report" --force --title "vltools demo: SGR trained on the synthetic world, on real photos" \
    --rankings "$OUT/photos_rankings.jsonl" --images "$PHOTOS" --captions "$CAPTIONS" \
    --scores "$OUT/photos_scores.json" --scores "$OUT/test_scores.json" --log "$OUT/sgr.pt.log.jsonl" --sample 0
echo
echo "Done. Open $(cd "$OUT" && pwd)/report/index.html in a browser (no server needed)."
echo "Next: the released SGRAF on your own photos (README, \"First thing to try\"); the papers' tables: make tables."
