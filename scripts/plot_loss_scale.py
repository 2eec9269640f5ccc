#!/usr/bin/env python
"""Turn TensorBoard event files into a PNG: loss scale, overflow events and loss over steps.

Reads the scalars that ``npu_loss_scale.frontends.hooks.LossScaleHook`` writes (``loss_scale/scale``,
``loss_scale/overflow``, ``loss_scale/skipped_steps``, ``loss_scale/loss``), whose step axis is
the training iteration (applied + skipped steps), from the event files directly inside each run
folder (sub-folders such as an Estimator's ``eval_*`` are not read).

    python scripts/plot_loss_scale.py --output loss_scale.png fp32=runs/fp32 fp16=runs/fp16
    python scripts/plot_loss_scale.py --output loss_scale.png runs/fp16     # label = folder name

Three panels share the x axis: the loss scale (log2 axis) with each overflowed, skipped step
marked; the running count of skipped steps; the training loss (thin) and its moving average.
Needs TensorFlow (to read the event files) and matplotlib.
"""
import argparse
import glob
import os
import sys

TAG_SCALE = "loss_scale/scale"
TAG_OVERFLOW = "loss_scale/overflow"
TAG_SKIPPED = "loss_scale/skipped_steps"
TAG_LOSS = "loss_scale/loss"
TAGS = (TAG_SCALE, TAG_OVERFLOW, TAG_SKIPPED, TAG_LOSS)


def _event_files(directory):
    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    if not files:
        raise FileNotFoundError("no TensorBoard event files (events.out.tfevents.*) in %r"
                                % directory)
    return files


def _iter_scalars(path, tags):
    """Yields (tag, step, value) for the scalars of ``tags`` in one event file."""
    import tensorflow as tf
    for event in tf.compat.v1.train.summary_iterator(path):
        if not event.HasField("summary"):
            continue
        for value in event.summary.value:
            if value.tag not in tags:
                continue
            if value.HasField("simple_value"):
                yield value.tag, event.step, float(value.simple_value)
            elif value.HasField("tensor"):
                array = tf.make_ndarray(value.tensor)
                if array.size == 1 and array.dtype.kind in "fiub":
                    yield value.tag, event.step, float(array.reshape(()))


def read_run(directory, tags=TAGS):
    """Returns ``{tag: (steps, values)}`` (sorted by step; for a step written twice, e.g. by
    a restarted run, the last value wins) for the requested tags found in ``directory``."""
    series = {}
    for path in _event_files(directory):
        for tag, step, value in _iter_scalars(path, tags):
            series.setdefault(tag, {})[step] = value
    return {tag: (sorted(points), [points[s] for s in sorted(points)])
            for tag, points in series.items()}


def _moving_average(values, window):
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot(runs, output, title=None, smooth=20):
    """Draws ``runs`` (a list of ``(label, {tag: (steps, values)})``) into the PNG ``output``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_scale, ax_skip, ax_loss) = plt.subplots(
        3, 1, sharex=True, figsize=(9, 8.5), gridspec_kw={"height_ratios": [3, 1.4, 2]})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (label, series) in enumerate(runs):
        color = colors[index % len(colors)]
        if TAG_SCALE not in series:
            raise ValueError("run %r has no %r scalars: was it trained with LossScaleHook "
                             "writing summaries?" % (label, TAG_SCALE))
        steps, scales = series[TAG_SCALE]
        ax_scale.step(steps, scales, where="post", color=color, label=label + ": loss scale")
        overflow_steps, overflow_scales = [], []
        if TAG_OVERFLOW in series:
            scale_at = dict(zip(steps, scales))
            for step, flag in zip(*series[TAG_OVERFLOW]):
                if flag > 0.5 and step in scale_at:
                    overflow_steps.append(step)
                    overflow_scales.append(scale_at[step])
        ax_scale.scatter(overflow_steps, overflow_scales, marker="x", color=color, s=28,
                         zorder=3, label="%s: overflow, step skipped (%d)"
                         % (label, len(overflow_steps)))
        if TAG_SKIPPED in series:
            ax_skip.step(*series[TAG_SKIPPED], where="post", color=color, label=label)
        if TAG_LOSS in series:
            loss_steps, losses = series[TAG_LOSS]
            ax_loss.plot(loss_steps, losses, color=color, alpha=0.25, linewidth=0.8)
            ax_loss.plot(loss_steps, _moving_average(losses, smooth), color=color,
                         label="%s (moving average of %d)" % (label, smooth))
    ax_scale.set_yscale("log", base=2)
    ax_scale.set_ylabel("loss scale")
    ax_scale.grid(True, which="major", alpha=0.3)
    ax_scale.legend(fontsize=8, loc="center right")
    ax_skip.set_ylabel("skipped steps")
    ax_skip.grid(True, alpha=0.3)
    ax_skip.legend(fontsize=8, loc="lower right")
    ax_loss.set_ylabel("training loss")
    ax_loss.set_xlabel("training iteration (applied + skipped steps)")
    ax_loss.grid(True, alpha=0.3)
    if ax_loss.get_legend_handles_labels()[0]:
        ax_loss.legend(fontsize=8, loc="upper right")
    fig.suptitle(title or "Loss scale, overflows and loss")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return output


def _parse_run(text):
    label, sep, directory = text.partition("=")
    if not sep:
        directory = text
        label = os.path.basename(os.path.normpath(text))
    return label, directory


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", metavar="[LABEL=]DIR",
                        help="run folder with event files, optionally labelled")
    parser.add_argument("--output", required=True, help="PNG file to write")
    parser.add_argument("--title", default=None)
    parser.add_argument("--smooth", type=int, default=20, help="moving-average window of the loss")
    args = parser.parse_args(argv)
    runs = []
    for text in args.runs:
        label, directory = _parse_run(text)
        try:
            runs.append((label, read_run(directory)))
        except FileNotFoundError as err:
            parser.error(str(err))
    plot(runs, args.output, title=args.title, smooth=max(1, args.smooth))
    print("wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
