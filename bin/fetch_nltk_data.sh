#!/usr/bin/env bash
# Fetch NLTK's averaged-perceptron POS tagger data, used by `vltools concepts --tagger nltk|auto` (SCO).
# Usage: bin/fetch_nltk_data.sh [DIR]   (default DIR: ~/nltk_data, one of the places NLTK searches)
# Without it, `vltools concepts` falls back to its offline stop-word filter and records that in its output.
set -euo pipefail
DIR=${1:-$HOME/nltk_data}
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" - "$DIR" 2>/dev/null <<'PY'
import sys
import nltk
ok = all(nltk.download(name, download_dir=sys.argv[1], quiet=True, raise_on_error=True)
         for name in ("averaged_perceptron_tagger_eng", "averaged_perceptron_tagger"))
sys.exit(0 if ok else 1)
PY
then
    echo "fetch_nltk_data.sh: could not download NLTK's averaged_perceptron_tagger (no network?); copy the" \
         "taggers/averaged_perceptron_tagger_eng folder of nltk_data into $DIR/taggers/ by hand" >&2
    exit 1
fi
echo "NLTK tagger data installed in $DIR" >&2
