#!/usr/bin/env bash
# Fetch NLTK's averaged-perceptron POS tagger data, used by `vltools concepts --tagger nltk|auto` (SCO).
# Usage: bin/fetch_nltk_data.sh [DIR]   (default DIR: ~/nltk_data, one of the places NLTK searches)
# Without it, `vltools concepts` falls back to its offline stop-word filter and records that in its output.
# VLTOOLS_OFFLINE=1: touch no network; print what to fetch and where to put it, and exit 1 (as offline).
set -euo pipefail
DIR=${1:-$HOME/nltk_data}
PYTHON=${PYTHON:-python3}
URL=https://raw.githubusercontent.com/nltk/nltk_data/gh-pages/packages/taggers/averaged_perceptron_tagger_eng.zip
offline() {
    echo "fetch_nltk_data.sh: could not download NLTK's averaged_perceptron_tagger_eng (no network?); fetch $URL" \
         "and unzip it into $DIR/taggers/" >&2
    exit 1
}
[[ ${VLTOOLS_OFFLINE:-0} == 1 ]] && offline
if ! "$PYTHON" - "$DIR" 2>/dev/null <<'PY'
import sys
import nltk
ok = all(nltk.download(name, download_dir=sys.argv[1], quiet=True, raise_on_error=True)
         for name in ("averaged_perceptron_tagger_eng", "averaged_perceptron_tagger"))
sys.exit(0 if ok else 1)
PY
then
    offline
fi
echo "NLTK tagger data installed in $DIR" >&2
