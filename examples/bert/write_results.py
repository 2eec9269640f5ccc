"""Writes the results table README includes, from the runs' ``results.json`` files.

    python examples/bert/write_results.py --runs=out/bert/fp32,out/bert/fp16 \\
        --wall_seconds=612 --output=out/bert/RESULTS.md

``scripts/run_bert.sh`` calls it after the fp32 and fp16 runs.
"""
import argparse
import json
import os
import platform
import sys


def load(run_dir):
    with open(os.path.join(run_dir, "results.json"), encoding="utf-8") as handle:
        return json.load(handle)


def _scaling(r):
    if r["npu_bert_loss_scale"] == 0:
        return "dynamic, from 2^%d" % round(_log2(r["init_loss_scale_value"]))
    return "fixed %g" % r["npu_bert_loss_scale"]


def _log2(x):
    import math
    return math.log2(x)


def _scale(x):
    if x is None:
        return "-"
    exponent = _log2(x)
    if abs(exponent - round(exponent)) < 1e-9:
        return "2^%d" % round(exponent)
    return "%g" % x


def _settled_at(r):
    """The iteration after which the loss scale did not change again (None if never set)."""
    history = r.get("history") or []
    if not history:
        return None
    last = history[-1]["loss_scale"]
    settled = history[-1]["iteration"]
    for h in reversed(history):
        if h["loss_scale"] != last:
            break
        settled = h["iteration"]
    return settled


def _optimizer_text(r):
    """How the run trained: the optimizer and its schedule."""
    style = r.get("lr_decay_style", "linear")
    if r.get("scheduler") == "OptimizerParamScheduler":
        return ("Adam with decoupled weight decay %g (none on LayerNorm and bias), learning rate "
                "%g with %d warmup steps then %s decay, both from OptimizerParamScheduler "
                "(applied steps only)" % (r.get("weight_decay", 0.0), r["learning_rate"],
                                          r["warmup_steps"], style))
    return ("Adam, learning rate %g with %d warmup steps then %s decay"
            % (r["learning_rate"], r["warmup_steps"], style))


def render(results, wall_seconds=None, cores=None, tf_version=None):
    lines = [
        "| precision | loss scaling | held-out accuracy | skipped steps | iterations "
        "(applied + skipped) | final loss scale | s/step | train + eval time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append("| %s | %s | %.3f | %d | %d + %d | %s | %.2f | %.0f s + %.0f s |" % (
            r["precision"], _scaling(r), r["accuracy"], r["skipped_steps"],
            r["global_step"], r["iterations"] - r["global_step"], _scale(r["final_loss_scale"]),
            r["seconds_per_step"] or 0.0, r["train_seconds"], r["eval_seconds"]))
    first = results[0]
    notes = [
        "",
        "%d applied steps of batch %d at sequence length %d, %s; held-out set: %d sentences. "
        "s/step is the mean wall time of a training iteration (skipped ones included) after "
        "the first."
        % (first["train_steps"], first["batch_size"], first["max_seq_length"],
           _optimizer_text(first), first["heldout_sentences"]),
    ]
    by_precision = {r["precision"]: r for r in results}
    if "fp32" in by_precision and "fp16" in by_precision:
        diff = (by_precision["fp16"]["accuracy"] - by_precision["fp32"]["accuracy"]) * 100
        notes.append("fp16 - fp32 accuracy: %+.1f points." % diff)
    for r in results:
        settled = _settled_at(r)
        if r["skipped_steps"] and settled is not None:
            during = sum(1 for h in r["history"] if h["overflow"] and h["iteration"] < settled)
            notes.append("%s: the loss scale fell from %s to %s by iteration %d (%d overflowed "
                         "steps skipped on the way) and then stayed at %s for the remaining %d "
                         "iterations (%d more skipped); every skipped step is logged and marked "
                         "in the plot."
                         % (r["precision"], _scale(r["history"][0]["loss_scale"]),
                            _scale(r["final_loss_scale"]), settled, during,
                            _scale(r["final_loss_scale"]), r["iterations"] - settled,
                            r["skipped_steps"] - during))
    machine = []
    if cores:
        machine.append("%d CPU cores" % cores)
    if tf_version:
        machine.append("TensorFlow %s" % tf_version)
    if wall_seconds is not None:
        machine.append("whole command %.1f min" % (wall_seconds / 60.0))
    if machine:
        notes.append("Measured on %s (CPU emulation of the Ascend float-status register)."
                     % ", ".join(machine))
    return "\n".join(lines + ["", " ".join(notes[1:])]).rstrip() + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", required=True, help="comma-separated run folders")
    parser.add_argument("--output", required=True)
    parser.add_argument("--wall_seconds", type=float, default=None)
    args = parser.parse_args(argv)
    results = [load(d) for d in args.runs.split(",") if d]
    try:
        import tensorflow as tf
        tf_version = tf.__version__
    except ImportError:
        tf_version = None
    text = render(results, wall_seconds=args.wall_seconds, cores=os.cpu_count(),
                  tf_version=tf_version)
    with open(args.output, "w", encoding="utf-8") as handle:
        handle.write(text)
    sys.stdout.write(text)
    print("wrote %s (python %s)" % (args.output, platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
