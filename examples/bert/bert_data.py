"""Rotten Tomatoes sentences (Pang & Lee) from the pinned vaderSentiment 3.3.2 sdist.

The sdist carries ``additional_resources/hutto_ICWSM_2014.tar.gz`` (Hutto & Gilbert, "VADER: A
Parsimonious Rule-based Model for Sentiment Analysis of Social Media Text", ICWSM 2014), which
holds ``hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt``: 10,605 sentences, tab-separated
``id, mean human rating (-4..4), text``. Label 1 = rating > 0, label 0 = rating < 0; sentences
rated exactly 0 are dropped (10,568 remain). Both archives are read in memory, nothing is
extracted to disk.
"""
import hashlib
import io
import os
import subprocess
import sys
import tarfile

import numpy as np

INNER_ARCHIVE = "additional_resources/hutto_ICWSM_2014.tar.gz"
MEMBER = "hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt"
DEFAULT_SEED = 20140601
DEFAULT_HELDOUT = 1000

SDIST_REQUIREMENT = "vaderSentiment==3.3.2"
SDIST_FILE = "vaderSentiment-3.3.2.tar.gz"
SDIST_SHA256 = "5d7c06e027fc8b99238edb0d53d970cf97066ef97654009890b83703849632f9"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ensure_sdist(cache_dir):
    """Returns the path of the pinned vaderSentiment sdist in ``cache_dir``, downloading it with
    ``pip download --no-deps --no-binary :all:`` if it is not there; checks its sha256 either
    way (ValueError on a mismatch, RuntimeError if pip cannot fetch it)."""
    path = os.path.join(cache_dir, SDIST_FILE)
    if not os.path.exists(path):
        os.makedirs(cache_dir, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                   "--no-binary", ":all:", "--dest", cache_dir, SDIST_REQUIREMENT]
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              universal_newlines=True, check=False)
        if done.returncode != 0 or not os.path.exists(path):
            raise RuntimeError("could not download %s: %s" % (SDIST_REQUIREMENT,
                                                             done.stdout.strip()[-500:]))
    digest = sha256_of(path)
    if digest != SDIST_SHA256:
        raise ValueError("sha256 of %s is %s, expected %s" % (path, digest, SDIST_SHA256))
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


def encode_all(tokenizer, sentences, max_seq_length):
    """Encodes sentences into int32 arrays ``input_ids, input_mask, segment_ids`` and returns
    them in a dict, plus the number of sentences that were cut to ``max_seq_length``."""
    ids, masks, segments, cut = [], [], [], 0
    for sentence in sentences:
        i, m, s, truncated = tokenizer.encode(sentence, max_seq_length)
        ids.append(i)
        masks.append(m)
        segments.append(s)
        cut += int(truncated)
    features = {
        "input_ids": np.asarray(ids, dtype=np.int32),
        "input_mask": np.asarray(masks, dtype=np.int32),
        "segment_ids": np.asarray(segments, dtype=np.int32),
    }
    return features, cut


def prepare(sdist_path, tokenizer, max_seq_length, heldout=DEFAULT_HELDOUT, seed=DEFAULT_SEED):
    """Everything the example needs: ``{'train': (features, labels), 'heldout': (...),
    'truncated': int}``."""
    sentences, labels = load_movie_reviews(sdist_path)
    features, cut = encode_all(tokenizer, sentences, max_seq_length)
    train_idx, held_idx = split(len(sentences), heldout=heldout, seed=seed)

    def take(idx):
        return {k: v[idx] for k, v in features.items()}, labels[idx]

    return {"train": take(train_idx), "heldout": take(held_idx), "truncated": cut,
            "sentences": sentences}
