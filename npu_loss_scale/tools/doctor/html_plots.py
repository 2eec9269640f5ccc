"""The doctor page's plots (:mod:`.html`): matplotlib figures rendered to SVG text that the page
inlines, so it needs no file beside it and makes no request.

Every function takes plain data already read from the report (lists of numbers, None where a
value is unknown, inf and NaN as floats) and returns the SVG of one figure. matplotlib is
imported when a figure is made, never at load time; only its object-oriented interface is used
(``Figure``, no pyplot), which keeps no global figure state and needs no display.
"""
import io
import math
import re

__all__ = ["MODE_STYLE", "loss_scale_svg", "sites_svg", "fix_effect_svg"]

# Okabe and Ito's colour-blind-safe palette: one colour per saturation mode, before and after.
MODE_STYLE = {
    "saturation": {"color": "#0072B2", "linestyle": "-", "label": "saturation mode"},
    "inf_nan": {"color": "#D55E00", "linestyle": "--", "label": "INF/NaN mode"},
}
_OTHER_MODE = {"color": "#009E73", "linestyle": "-.", "label": None}
_BEFORE = {"color": "#7f7f7f", "linestyle": "--", "label": "before the fix"}
_AFTER = {"color": "#009E73", "linestyle": "-", "label": "after the fix"}
MAX_VECTOR_CELLS = 4000  # more grid squares than this are drawn as one raster image
_SVG_START = re.compile(r"<svg\b")
_ID = re.compile(r'\bid="([^"]+)"')


def _finite(value):
    return value is not None and math.isfinite(value)


def _gaps(values):
    """The values with None (unknown) and inf/NaN as NaN: matplotlib leaves a gap there."""
    return [value if _finite(value) else float("nan") for value in values]


def _svg(matplotlib, figure, prefix):
    """The figure as SVG text for inlining: no XML prolog or DOCTYPE (the page is HTML), text as
    text (the page's fonts, selectable, smaller), no creation date (the same report makes the
    same page) and every id prefixed, since several figures share one page (the ids given to
    artists here already start with the prefix)."""
    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": prefix}):
        figure.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    text = text[_SVG_START.search(text).start():]
    ids = {name for name in _ID.findall(text) if not name.startswith(prefix + "-")}
    for name in sorted(ids, key=len, reverse=True):
        text = (text.replace('id="%s"' % name, 'id="%s-%s"' % (prefix, name))
                    .replace("#%s)" % name, "#%s-%s)" % (prefix, name))
                    .replace('href="#%s"' % name, 'href="#%s-%s"' % (prefix, name)))
    return text


def _matplotlib():
    """matplotlib with the submodules used here (imported on first use: an optional piece)."""
    import matplotlib  # pylint: disable=import-outside-toplevel
    import matplotlib.colors  # pylint: disable=import-outside-toplevel,unused-import
    import matplotlib.figure  # pylint: disable=import-outside-toplevel,unused-import
    import matplotlib.ticker  # pylint: disable=import-outside-toplevel,unused-import
    return matplotlib


def _figure(matplotlib, width, height):
    figure = matplotlib.figure.Figure(figsize=(width, height), dpi=100)
    figure.patch.set_alpha(0.0)
    return figure


def _margins(figure, left=0.85, right=0.25, top=0.35, bottom=0.55, between=0.75):
    """Fixed margins in inches (matplotlib's tight_layout would draw every figure once more)."""
    width, height = figure.get_size_inches()
    figure.subplots_adjust(left=left / width, right=1 - right / width, top=1 - top / height,
                           bottom=bottom / height, hspace=between / height * 2,
                           wspace=between / width * 2)


def _style_axes(axes, title, xlabel, ylabel):
    axes.set_title(title, loc="left", fontsize=11)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.grid(True, color="#e3e3e3", linewidth=0.8)
    axes.set_axisbelow(True)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)


def _integer_steps(matplotlib, axes):
    axes.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))


def _log2_axis(matplotlib, axes, values):
    """A base-2 logarithmic y axis when every known value is positive (loss scales are powers of
    two), with ticks written 2^k."""
    known = [value for value in values if _finite(value)]
    if known and min(known) > 0:
        axes.set_yscale("log", base=2)
        axes.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(
            lambda value, _: "$2^{%d}$" % round(math.log2(value)) if value > 0 else ""))


def loss_scale_svg(runs, prefix):
    """The loss scale each run's steps used, one line per saturation mode, skipped steps marked
    with a cross and applied steps with a dot; a second panel with the loss when any is known.

    ``runs``: [(mode, steps, scales, skipped, losses)], each a list over the run's steps. The
    markers of each mode are the SVG groups ``<prefix>-skipped-<mode>`` and
    ``<prefix>-applied-<mode>``, one element per step."""
    matplotlib = _matplotlib()
    any_loss = any(_finite(loss) for _, _, _, _, losses in runs for loss in losses)
    figure = _figure(matplotlib, 8.0, 5.6 if any_loss else 3.4)
    panels = figure.subplots(2 if any_loss else 1, 1, sharex=True, squeeze=False)[:, 0]
    axes = panels[0]
    all_scales = []
    for mode, steps, scales, skipped, _ in runs:
        style = dict(MODE_STYLE.get(mode, _OTHER_MODE))
        style["label"] = style["label"] or mode
        all_scales.extend(scales)
        axes.step(steps, _gaps(scales), where="post", linewidth=1.6, color=style["color"],
                  linestyle=style["linestyle"], label=style["label"])
        applied_x = [s for s, scale, skip in zip(steps, scales, skipped) if not skip and _finite(scale)]
        applied_y = [scale for scale, skip in zip(scales, skipped) if not skip and _finite(scale)]
        skipped_x = [s for s, scale, skip in zip(steps, scales, skipped) if skip and _finite(scale)]
        skipped_y = [scale for scale, skip in zip(scales, skipped) if skip and _finite(scale)]
        axes.plot(applied_x, applied_y, "o", markersize=4, color=style["color"],
                  gid="%s-applied-%s" % (prefix, mode))
        axes.plot(skipped_x, skipped_y, "x", markersize=8, markeredgewidth=2, color=style["color"],
                  label="%s: skipped step" % style["label"], gid="%s-skipped-%s" % (prefix, mode))
    _log2_axis(matplotlib, axes, all_scales)
    _style_axes(axes, "Loss scale per step (x: skipped, dot: applied)", "" if any_loss else "step",
                "loss scale")
    axes.legend(fontsize=8, frameon=False, loc="best")
    if any_loss:
        loss_axes = panels[1]
        for mode, steps, _, skipped, losses in runs:
            style = MODE_STYLE.get(mode, _OTHER_MODE)
            loss_axes.plot(steps, _gaps(losses), color=style["color"], linestyle=style["linestyle"],
                           linewidth=1.4, marker="o", markersize=3)
        _style_axes(loss_axes, "Loss per step", "step", "loss")
    _integer_steps(matplotlib, panels[-1])
    _margins(figure)
    return _svg(matplotlib, figure, prefix)


def sites_svg(layers, steps, counts, mode, prefix):
    """A grid of layer (rows) by step (columns): one square per layer and step where any of the
    layer's ops overflowed in one mode's run, its colour the number of them; no square where none
    did. The squares are the SVG group ``<prefix>-cells``, one element each (one embedded image
    for more than ``MAX_VECTOR_CELLS``).

    ``counts``: {(layer, step): number of sites}, ``layers`` and ``steps`` the rows and columns
    in order."""
    import numpy  # pylint: disable=import-outside-toplevel
    matplotlib = _matplotlib()
    from matplotlib.collections import PatchCollection  # pylint: disable=import-outside-toplevel
    from matplotlib.patches import Rectangle  # pylint: disable=import-outside-toplevel
    figure = _figure(matplotlib, 8.0, min(1.3 + 0.34 * len(layers), 9.0))
    labels = [layer if len(layer) <= 40 else "\u2026" + layer[-39:] for layer in layers]
    axes = figure.subplots()
    cells = sorted(counts.items(), key=lambda item: (layers.index(item[0][0]), item[0][1]))
    top = max(count for _, count in cells)
    # counts 1..top as discrete colours from a clear orange to a deep red
    base = matplotlib.colormaps["YlOrRd"]
    colours = matplotlib.colors.ListedColormap(
        base(numpy.linspace(0.45, 0.95, top)) if top > 1 else [base(0.6)])
    norm = matplotlib.colors.BoundaryNorm(numpy.arange(0.5, top + 1.0), colours.N)
    squares = PatchCollection(
        [Rectangle((step - 0.5, layers.index(layer) - 0.5), 1.0, 1.0) for (layer, step), _ in cells],
        cmap=colours, norm=norm, edgecolor="white", linewidth=0.6 if len(steps) <= 80 else 0.0)
    squares.set_array(numpy.array([count for _, count in cells], dtype=float))
    squares.set_gid("%s-cells" % prefix)
    # a long run of many layers: one embedded image rather than thousands of SVG paths
    squares.set_rasterized(len(cells) > MAX_VECTOR_CELLS)
    axes.add_collection(squares)
    axes.set_facecolor("#f4f5f7")
    axes.set_xlim(steps[0] - 0.5, steps[-1] + 0.5)
    axes.set_ylim(len(layers) - 0.5, -0.5)
    axes.set_yticks(range(len(layers)))
    axes.set_yticklabels(labels, fontsize=8)
    _integer_steps(matplotlib, axes)
    _style_axes(axes, MODE_STYLE.get(mode, {}).get("label") or mode, "step", "layer")
    axes.grid(False)
    bar = figure.colorbar(squares, ax=axes, fraction=0.04, pad=0.02)
    bar.set_label("ops that overflowed", fontsize=8)
    bar.set_ticks([t for t in matplotlib.ticker.MaxNLocator(integer=True).tick_values(1, top)
                   if 1 <= t <= top])
    _margins(figure, left=0.75 + 0.062 * max(len(label) for label in labels), right=0.2)
    return _svg(matplotlib, figure, prefix)


def fix_effect_svg(steps, loss_before, loss_after, scale_before, scale_after, prefix):
    """Side by side: the loss and the loss scale per step of the same run before and after the
    fix (either panel left out when neither side has a known value); None when neither has."""
    matplotlib = _matplotlib()
    panels = []
    if any(_finite(v) for v in list(loss_before) + list(loss_after)):
        panels.append(("Loss", "loss", loss_before, loss_after))
    if any(_finite(v) for v in list(scale_before) + list(scale_after)):
        panels.append(("Loss scale", "loss scale", scale_before, scale_after))
    if not panels:
        return None
    figure = _figure(matplotlib, 4.0 * len(panels) + 0.4, 2.8)
    for index, (title, ylabel, before, after) in enumerate(panels):
        axes = figure.add_subplot(1, len(panels), index + 1)
        for values, style in ((before, _BEFORE), (after, _AFTER)):
            xs = list(steps)[:len(values)] if len(values) <= len(steps) else range(1, len(values) + 1)
            axes.plot(list(xs), _gaps(values), color=style["color"], linestyle=style["linestyle"],
                      linewidth=1.6, marker="o", markersize=3, label=style["label"])
        if ylabel == "loss scale":
            _log2_axis(matplotlib, axes, list(before) + list(after))
        _style_axes(axes, title + " per step", "step", ylabel)
        _integer_steps(matplotlib, axes)
        axes.legend(fontsize=8, frameon=False, loc="best")
    _margins(figure)
    return _svg(matplotlib, figure, prefix)
