"""Caption metrics exactly as the COCO caption evaluation server computes them (pycocoevalcap).

BLEU-1..4 (closest reference length), METEOR 1.5, ROUGE-L, CIDEr-D and, when the Stanford CoreNLP models
are installed, SPICE, after the same PTB tokenisation (Stanford PTBTokenizer, lower case, punctuation
removed). Predictions and references are read from captions JSONL (keyed by `image_id`), pairs JSONL or
pair captions (keyed by `pair_id`, text in `description` or `caption`), or any COCO caption JSON that
vltools.io.coco reads (annotations, results, SPICE input); the format is detected from the content.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vltools.children import dies_with_parent, tied_children
from vltools.errors import VLToolsError, first_line, input_error, shown_ids
from vltools.io.caption_files import CaptionFile
from vltools.io.progress import captured_children, log
from vltools.text.tokenize import tokenize

METRICS = ("Bleu_1", "Bleu_2", "Bleu_3", "Bleu_4", "METEOR", "ROUGE_L", "CIDEr")
JAVA_FIX = "install a Java runtime: apt-get install default-jre-headless (or put `java` on PATH)"
# how pycocoevalcap runs METEOR 1.5's jar (the same options, so that the scores are its): java's options, then the
# jar's (standard input and output, English, normalised)
METEOR_JAVA = ("-Xmx2G", "-jar")
METEOR_ARGS = ("-", "-", "-stdio", "-l", "en", "-norm")
# what a JVM prints when it cannot have the memory it asks for
JAVA_MEMORY_ERRORS = ("OutOfMemoryError", "Could not reserve enough space", "insufficient memory",
                      "Cannot allocate memory")
SPICE_CORENLP = "stanford-corenlp-3.6.0"
# sentence pairs meteor_pairs sends before reading their statistics back: 256 lines of at most 23 numbers stay
# under the 64 KiB pipe buffer, so java never blocks on a full stdout while it still has input to read
METEOR_CHUNK = 256
# brackets as Stanford's PTBTokenizer writes them under -lowerCase (pycocoevalcap keeps these tokens)
PTB_BRACKETS = {"(": "-lrb-", ")": "-rrb-", "[": "-lsb-", "]": "-rsb-", "{": "-lcb-", "}": "-rcb-"}


@dataclass
class CaptionScores:
    """Corpus metrics, per-item metrics (same keys) in prediction order, BLEU's length and n-gram counts."""

    metrics: dict[str, object]     # name -> score; a skipped metric None, and "skipped": {name: reason}
    per_item: dict[str, dict[str, float]]
    bleu_counts: dict[str, object]


def pair_predictions(predictions: CaptionFile, references: CaptionFile,
                     strict: bool = False) -> tuple[dict[str, str], dict[str, list[str]]]:
    """One prediction per id, each with its references; the references of unpredicted ids are left out.

    An empty or blank reference of a predicted id is kept and scored as the COCO evaluation code scores it
    (it tokenises to nothing, so it matches nothing but still counts in BLEU's closest length and CIDEr's
    document frequencies), with one warning counting them; `strict` refuses them instead. Empty predictions
    are scored (they score 0) and counted in one warning."""
    duplicates = [i for i, texts in predictions.texts.items() if len(texts) > 1]
    if duplicates:
        first = duplicates[0]
        raise input_error(predictions.path, ", ".join(predictions.where[first]),
                          f"{len(duplicates)} {predictions.key}s have several predictions, e.g. {first!r}",
                          "give exactly one caption per id")
    missing = [i for i in predictions.texts if i not in references.texts]
    if missing:
        raise input_error(predictions.path, None, f"{len(missing)} predicted {predictions.key}s have no reference "
                          f"in {references.path}: {shown_ids(missing)}", "score against the matching reference file")
    predicted = {i: texts[0] for i, texts in predictions.texts.items()}
    blank = [(i, k) for i in predicted for k, text in enumerate(references.texts[i]) if not text.strip()]
    if blank and strict:
        item, k = blank[0]
        raise input_error(references.path, references.where[item][k], f"empty reference for {predictions.key} "
                          f"{item!r} ({len(blank)} empty or blank references of predicted ids)",
                          "drop or fill the empty references, or score without --strict as the COCO server does")
    if blank:
        blank_ids = list(dict.fromkeys(i for i, _ in blank))
        log.warning("%s: %d empty or blank references of predicted %ss (%s); they are scored as the COCO "
                    "evaluation code scores them (--strict refuses them)", references.path, len(blank),
                    predictions.key, shown_ids(blank_ids))
    empty = [i for i, text in predicted.items() if not text.strip()]
    if empty:
        log.warning("%s: %d of %d predictions are empty or blank (first: %s %r); they are scored as they are",
                    predictions.path, len(empty), len(predicted), predictions.key, empty[0])
    return predicted, {i: references.texts[i] for i in predicted}


def java_path() -> str:
    """The `java` executable that pycocoevalcap's tokenizer and METEOR need, or a one-line error."""
    java = shutil.which("java")
    if java is None:
        raise VLToolsError(f"java not found: the PTB tokenizer and METEOR run on Java; {JAVA_FIX}")
    return java


def spice_missing() -> str | None:
    """Why SPICE cannot run offline (its Stanford CoreNLP jars are absent), or None when it can."""
    import pycocoevalcap.spice.spice as spice_module

    lib = Path(spice_module.__file__).parent / "lib"
    needed = [lib / f"{SPICE_CORENLP}.jar", lib / f"{SPICE_CORENLP}-models.jar"]
    absent = [p for p in needed if not p.is_file()]
    if absent:
        return (f"the Stanford CoreNLP models are not installed ({absent[0]} is missing; run "
                "`python -m pycocoevalcap.spice.get_stanford_models` once with network access)")
    return None


def ptb_tokenize(texts: dict[str, list[str]]) -> dict[str, list[str]]:
    """Stanford PTB tokenisation as the COCO server does it: lower case, punctuation tokens removed."""
    from pycocoevalcap.tokenizer import ptbtokenizer

    java_path()
    # the tokenizer reads one sentence a line: any line break inside a caption would shift every later one
    flat = {i: [{"caption": " ".join(t.split())} for t in captions] for i, captions in texts.items()}
    try:
        with captured_children(), tied_children(ptbtokenizer):  # "PTBTokenizer tokenized N tokens" kept out
            tokens = ptbtokenizer.PTBTokenizer().tokenize(flat)
    except OSError as exc:
        raise VLToolsError(f"PTB tokenizer failed ({exc}); pycocoevalcap writes a temporary file beside its jar, "
                           "so its folder must be writable") from exc
    for item_id, captions in texts.items():
        if len(tokens.get(item_id, ())) != len(captions):
            raise VLToolsError(f"PTB tokenizer returned {len(tokens.get(item_id, ()))} captions for {item_id!r}, "
                               f"expected {len(captions)}; check that `java` is {JAVA_FIX.split(': ', 1)[1]}")
    return tokens


def treebank_tokenize(texts: dict[str, list[str]]) -> dict[str, list[str]]:
    """ptb_tokenize's tokens without Java, for validation during training (so that it needs no Java and picks
    the same checkpoint on every machine): NLTK's Treebank tokens of the lower-cased text, sentences split by
    vltools.text.tokenize's offline rule, brackets spelt as Stanford's and pycocoevalcap's punctuation removed.

    On 1,678 real COCO and Flickr captions the tokens equal Stanford's; they differ on rare spellings (a
    period after an abbreviation ending a caption, "!?"). `vltools score caption` keeps Stanford's tokenizer.
    """
    from pycocoevalcap.tokenizer.ptbtokenizer import PUNCTUATIONS

    removed = set(PUNCTUATIONS)
    return {item: [" ".join(PTB_BRACKETS.get(token, token) for token in tokenize(text, "rule") if token not in removed)
                   for text in captions] for item, captions in texts.items()}


@contextlib.contextmanager
def _meteor() -> Iterator[object]:
    """pycocoevalcap's METEOR scorer, its java process started by vltools to die with this process (`Meteor()`
    starts one that outlives a killed stage while it loads) and always closed (it would otherwise linger)."""
    from pycocoevalcap.meteor import meteor

    scorer = meteor.Meteor.__new__(meteor.Meteor)
    scorer.meteor_cmd = [java_path(), *METEOR_JAVA, meteor.METEOR_JAR, *METEOR_ARGS]
    scorer.meteor_p = process = subprocess.Popen(scorer.meteor_cmd, cwd=Path(meteor.__file__).parent,
                                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                 stderr=subprocess.PIPE, preexec_fn=dies_with_parent())
    scorer.lock = threading.Lock()
    try:
        yield scorer
    except (ValueError, BrokenPipeError) as exc:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)     # a java that closed its pipes is ending: its status says why
        raise meteor_error(process, exc) from exc
    finally:
        if scorer.lock.locked():  # a failed read leaves it held, and Meteor.__del__ would then wait forever
            scorer.lock.release()
        with contextlib.suppress(OSError):
            process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


def meteor_error(process: subprocess.Popen, exc: Exception) -> VLToolsError:
    """Why METEOR's java `process` gave no score, in one line: it ended (its exit status or signal and its last
    line on standard error; memory is named only when that says memory ran short, or a SIGKILL, as the kernel's
    out-of-memory killer sends, ended it), or it answered something other than a score (`exc`)."""
    java, status, check = process.args[0], process.returncode, JAVA_FIX
    if status is None:
        return VLToolsError(f"METEOR's java process ({java}) answered no score ({first_line(exc)}); {check}")
    text = process.stderr.read().decode(errors="replace").strip()
    ended = f"was killed by signal {-status}" if status < 0 else f"ended with exit status {status}"
    if status == -signal.SIGKILL or any(words in text for words in JAVA_MEMORY_ERRORS):
        check = "METEOR asks for 2 GB of memory (java -Xmx2G): free some, or score on a larger machine"
    return VLToolsError(f"METEOR's java process ({java}) {ended} before scoring: "
                        f"{text.splitlines()[-1] if text else 'nothing on standard error'}; {check}")


def meteor_field(text: str) -> str:
    """`text` as one field of the METEOR jar's line protocol: one line, no `|||` (its field separator)."""
    return " ".join(text.replace("|||", " ").split())


def meteor_pairs(pairs: Iterable[tuple[str, str]], chunk: int = METEOR_CHUNK) -> dict[tuple[str, str], float]:
    """METEOR 1.5 of each distinct (hypothesis, reference) pair, the reference alone, as pycocoevalcap computes it
    (its jar, English, `-norm`: the jar lower-cases and tokenises), each pair scored once, in one java process.

    The jar's `-stdio` protocol: `SCORE ||| reference ||| hypothesis` answers the pair's statistics, and
    `EVAL ||| stats ||| stats ...` each one's score, then their aggregate. Pairs go `chunk` at a time, each chunk's
    answers read before the next is sent, so that neither pipe fills while the other side waits (the deadlock of
    writing tens of thousands of lines first). Logs how many pairs were asked, how many distinct, pairs per second.
    """
    asked = 0
    scores: dict[tuple[str, str], float] = {}
    for pair in pairs:
        asked += 1
        scores.setdefault(pair, 0.0)
    distinct = list(scores)
    start = time.perf_counter()
    with _meteor() as scorer:
        process = scorer.meteor_p
        for first in range(0, len(distinct), chunk):
            block = distinct[first:first + chunk]
            process.stdin.write("".join(f"SCORE ||| {meteor_field(reference)} ||| {meteor_field(hypothesis)}\n"
                                        for hypothesis, reference in block).encode())
            process.stdin.flush()
            stats = [process.stdout.readline().decode().strip() for _ in block]
            process.stdin.write(f"EVAL ||| {' ||| '.join(stats)}\n".encode())
            process.stdin.flush()
            for pair in block:
                scores[pair] = float(process.stdout.readline().decode())
            process.stdout.readline()    # the chunk's aggregate score
    seconds = time.perf_counter() - start
    log.info("METEOR: %d sentence pairs, %d distinct, scored in %.1f s (%.0f pairs/s, java start included)",
             asked, len(distinct), seconds, len(distinct) / max(seconds, 1e-9))
    return scores


def _bleu(gts: dict[str, list[str]], res: dict[str, list[str]]) -> tuple[list[float], list[list[float]], dict]:
    from pycocoevalcap.bleu.bleu_scorer import BleuScorer

    scorer = BleuScorer(n=4)
    for item_id in gts:
        scorer += (res[item_id][0], gts[item_id])
    score, scores = scorer.compute_score(option="closest", verbose=0)
    correct = np.sum([comps["correct"] for comps in scorer.ctest], axis=0)
    guess = np.sum([comps["guess"] for comps in scorer.ctest], axis=0)
    counts = {"testlen": int(scorer.testlen()), "reflen": int(scorer.reflen()),
              "guess": [int(g) for g in guess], "correct": [int(c) for c in correct]}
    return score, scores, counts


def _put(per_item: dict[str, dict[str, float]], ids: list[str], name: str, values: object) -> None:
    for item_id, value in zip(ids, values, strict=True):
        per_item[item_id][name] = float(value)


def score_captions(predictions: dict[str, str], references: dict[str, list[str]], tokenized_refs: bool = False,
                   spice: bool = False, meteor: bool = True) -> CaptionScores:
    """COCO caption metrics of one prediction per id against its references (the same ids, in any order).

    `tokenized_refs`: the references are already PTB-tokenised, so only the predictions are tokenised.
    `spice`: compute SPICE too; an error if its CoreNLP models are missing (pycocoevalcap would download them).
    `meteor`: compute METEOR (a Java process that loads its paraphrase tables: seconds per call).
    """
    from pycocoevalcap.cider.cider import Cider
    from pycocoevalcap.rouge.rouge import Rouge

    ids = list(predictions)
    res = ptb_tokenize({i: [predictions[i]] for i in ids})
    gts = {i: list(references[i]) for i in ids} if tokenized_refs else ptb_tokenize({i: references[i] for i in ids})
    gts = {i: gts[i] for i in ids}
    res = {i: res[i] for i in ids}
    bleu, bleu_items, counts = _bleu(gts, res)
    metrics = {f"Bleu_{n + 1}": float(bleu[n]) for n in range(4)}
    per_item: dict[str, dict[str, float]] = {i: {} for i in ids}
    for n in range(4):
        _put(per_item, ids, f"Bleu_{n + 1}", bleu_items[n])
    if meteor:
        with _meteor() as scorer:
            score, items = scorer.compute_score(gts, res)
        metrics["METEOR"] = float(score)
        _put(per_item, ids, "METEOR", items)
    for name, scorer in (("ROUGE_L", Rouge()), ("CIDEr", Cider())):
        score, items = scorer.compute_score(gts, res)
        metrics[name] = float(score)
        _put(per_item, ids, name, items)
    if spice:
        from pycocoevalcap.spice import spice as spice_module

        if reason := spice_missing():
            raise VLToolsError(f"SPICE cannot run: {reason}")
        try:
            with captured_children(), tied_children(spice_module):
                score, items = spice_module.Spice().compute_score(gts, res)
        except subprocess.CalledProcessError as exc:
            raise VLToolsError(f"SPICE's java process failed (exit {exc.returncode}); it needs about 8 GB of "
                               "memory; rerun with --no-spice to skip it") from exc
        metrics["SPICE"] = float(score)
        _put(per_item, sorted(ids), "SPICE", [item["All"]["f"] for item in items])  # SPICE returns ids sorted
    return CaptionScores(metrics, per_item, counts)


def cider_d(predictions: dict[str, str], tokenized_refs: dict[str, list[str]]) -> float:
    """Corpus CIDEr-D (pycocoevalcap's, as in score_captions) of already tokenised predictions (a captioner's
    own lower-case, punctuation-free words, so no Java call) against tokenised references (ptb_tokenize or
    treebank_tokenize); cheap enough to pick checkpoints during training."""
    from pycocoevalcap.cider.cider import Cider

    ids = list(predictions)
    score, _ = Cider().compute_score({i: list(tokenized_refs[i]) for i in ids}, {i: [predictions[i]] for i in ids})
    return float(score)


def rouge_l(predictions: dict[str, str], tokenized_refs: dict[str, list[str]]) -> float:
    """Corpus ROUGE-L (pycocoevalcap's, as in score_captions) of already tokenised predictions against
    tokenised references (ptb_tokenize or treebank_tokenize): L2C picks checkpoints by it during training."""
    from pycocoevalcap.rouge.rouge import Rouge

    ids = list(predictions)
    score, _ = Rouge().compute_score({i: list(tokenized_refs[i]) for i in ids}, {i: [predictions[i]] for i in ids})
    return float(score)
