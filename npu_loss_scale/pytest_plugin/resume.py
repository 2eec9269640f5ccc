"""Does the loss-scale state survive a restart? :func:`assert_resume_matches` runs the user's
training twice, once straight through and once stopped and restarted from its checkpoint, and
compares every step's :class:`~npu_loss_scale.StepReport`.

Pseudocode::

    straight = train(workdir / "straight", until=steps)
    resumed = train(workdir / "resumed", until=resume_at) + train(workdir / "resumed", until=steps)
    for each step: straight[step] and resumed[step] agree, bit for bit, on the verdict, the loss
                   scale before and after the step and every counter both report

A restart that loses the loss scale (a ``Saver`` over the trainable variables only, a manager
rebuilt without its restored value), its growth or back-off counters, or ``global_step`` shows
as the first step whose report differs.
"""
import math
import os
import shutil
import tempfile


def _same(a, b):
    """Equal, bit for bit for floats: NaN equals NaN, and -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def _reports(train, model_dir, until, which):
    """The StepReports of the steps ``train(model_dir, until)`` ran (``which``: the call, for
    the errors); at least one."""
    # imported here: loading the plugin imports none of the package
    from npu_loss_scale.pytest_plugin.assertions import _report_of  # pylint: disable=import-outside-toplevel
    returned = train(model_dir, until)
    if isinstance(returned, dict) or hasattr(type(returned), "step_report"):
        raise TypeError("assert_resume_matches: train(model_dir, until) must return a list of "
                        "reports, one per step it ran; got one report: %r" % (returned,))
    try:
        reports = list(returned)
    except TypeError:
        raise TypeError("assert_resume_matches: train(model_dir, until) must return the reports "
                        "of the steps it ran (a list of sess.run(opt.step_report) values, a "
                        "LossScaleHook's history, ...); got %r" % (returned,)) from None
    objects = [r for r in reports if not isinstance(r, dict)]
    if len({id(r) for r in objects}) < len(objects):
        raise TypeError("assert_resume_matches: train(model_dir, until) returned the same object "
                        "for several steps (%r): an object's step_report is its latest step, so "
                        "append obj.step_report after each step instead" % (objects[0],))
    if not reports:
        raise ValueError("assert_resume_matches: train(model_dir, until=%d) %s ran no step "
                         "(returned no report); resume_at must fall inside the run"
                         % (until, which))
    return [_report_of(r, "assert_resume_matches") for r in reports]


def _outcome(report, ignore):
    """The step's verdicts and numbers, by name (values as plain Python numbers)."""
    outcome = {"overflowed": report.overflowed, "skipped": report.skipped}
    outcome.update(report.details)
    return {name: value for name, value in outcome.items() if name not in ignore}


def _check_ignore(ignore):
    from npu_loss_scale._internal.report import KEYS, VERDICT_KEYS  # pylint: disable=import-outside-toplevel
    numbers = [key for key in KEYS if key not in VERDICT_KEYS]
    if isinstance(ignore, str):
        ignore = (ignore,)
    try:
        ignore = tuple(ignore)
    except TypeError:
        raise TypeError("assert_resume_matches: ignore must be a list of report keys (%s); got %r"
                        % (", ".join(numbers), ignore)) from None
    unknown = [key for key in ignore if key not in numbers]
    if unknown:
        raise ValueError("assert_resume_matches: ignore holds %s, not a report's number; "
                         "accepted: %s (the verdicts are always compared)"
                         % (", ".join(map(repr, unknown)), ", ".join(numbers)))
    return ignore


def _check_arguments(train, steps, resume_at):
    if not callable(train):
        raise TypeError("assert_resume_matches: train must be a function train(model_dir, until) "
                        "returning the reports of the steps it ran; got %r" % (train,))
    for name, value in (("steps", steps), ("resume_at", resume_at)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError("assert_resume_matches: %s must be an int; got %r" % (name, value))
    if not 0 < resume_at < steps:
        raise ValueError("assert_resume_matches: resume_at must be between 1 and steps - 1 = %d "
                         "(the restart comes after resume_at steps, before the last); got "
                         "resume_at=%d, steps=%d" % (steps - 1, resume_at, steps))


#: Report keys assert_resume_matches leaves out by default: counts of skipped steps, which a
#: checkpoint holds only with NPULossScaleOptimizer(checkpoint_skipped_steps=True) (a
#: LossScaleHook's ``iteration`` is global_step plus that count).
PER_PROCESS_KEYS = ("skipped_steps", "iteration")


def assert_resume_matches(train, steps, resume_at, workdir=None, ignore=PER_PROCESS_KEYS):
    """Fails unless a run stopped at ``resume_at`` and restarted from its checkpoint reports
    the same steps as a run straight through to ``steps``.

    Args:
      train: ``train(model_dir, until)``, the user's training: restores from the checkpoint in
        ``model_dir`` when there is one, trains until its step counter reaches ``until`` (the
        script's own: ``global_step``, which a skipped step leaves alone on the TF1 adapter, or
        a loop counter it saves), saves a checkpoint in ``model_dir`` before returning, and
        returns the reports of the steps this call ran, a list with one per step:
        ``sess.run(opt.step_report)`` values, a ``LossScaleHook``'s ``history``, or each step's
        ``step_report`` (of a ``GradScaler`` after ``step()``, of the Keras optimizer).
      steps: where the straight run stops (``until`` of its one call).
      resume_at: where the first part of the resumed run stops, 1 to ``steps - 1``; choose it
        after a step that changed the loss-scale state (an overflow, a growth), or the check
        shows little.
      workdir: a folder for the two runs' model directories (``straight`` and ``resumed``), e.g.
        pytest's ``tmp_path``; default a temporary folder, removed afterwards.
      ignore: report keys not compared. By default ``skipped_steps``, the optimizer's count of
        skipped steps, and a ``LossScaleHook``'s ``iteration`` (``global_step`` plus that
        count): checkpoints hold the count only with
        ``NPULossScaleOptimizer(checkpoint_skipped_steps=True)``; with it, pass ``ignore=()``.

    Raises:
      AssertionError: at the first step whose verdict, loss scale or counter differs, naming it,
        or when the resumed run ran another number of steps in all.
      ValueError: when a call of ``train`` runs no step; when the straight run never overflows
        and never changes its loss scale (a lost state could not show: the check could not
        fail); for ``resume_at`` outside 1 to ``steps - 1``, an ``ignore`` key no report holds,
        a ``workdir`` that is a file or holds a run already.
      TypeError: when ``train`` is not callable or returns no list of per-step reports, when
        ``steps`` or ``resume_at`` is not an int, ``workdir`` not a path, ``ignore`` not a list.
    """
    __tracebackhide__ = True  # pylint: disable=unused-variable
    _check_arguments(train, steps, resume_at)
    ignore = _check_ignore(ignore)
    if workdir is None:
        folder = tempfile.mkdtemp(prefix="npu_loss_scale_resume_")
        try:
            return assert_resume_matches(train, steps, resume_at, folder, ignore)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    if isinstance(workdir, bool) or not isinstance(workdir, (str, os.PathLike)):
        raise TypeError("assert_resume_matches: workdir must be a folder's path (str or "
                        "pathlib.Path, e.g. pytest's tmp_path) or None; got %r" % (workdir,))
    if os.path.exists(workdir) and not os.path.isdir(workdir):
        raise ValueError("assert_resume_matches: workdir=%r is a file; give a folder" % (workdir,))
    straight_dir = os.path.join(str(workdir), "straight")
    resumed_dir = os.path.join(str(workdir), "resumed")
    for folder in (straight_dir, resumed_dir):
        if os.path.exists(folder) and os.listdir(folder):
            raise ValueError("assert_resume_matches: %s is not empty; give a fresh workdir"
                             % folder)
    straight = _reports(train, straight_dir, steps, "in a fresh model_dir")
    _check_telling(straight)
    before = _reports(train, resumed_dir, resume_at, "in a fresh model_dir")
    after = _reports(train, resumed_dir, steps, "restarted after until=%d" % resume_at)
    for step, (want, got) in enumerate(zip(straight, before + after)):
        _compare(step, _outcome(want, ignore), _outcome(got, ignore), len(before))
    if len(before) + len(after) != len(straight):
        raise AssertionError(
            "the resumed run ran %d + %d steps to reach until=%d, the straight run %d: the "
            "restart did not continue where the run stopped (restore global_step and the rest "
            "of the checkpoint before the loop)" % (len(before), len(after), steps, len(straight)))


def _check_telling(straight):
    """Refuses a straight run in which nothing of the loss-scale state changed."""
    scales = {s.loss_scale for s in straight} | {s.details.get("next_loss_scale") for s in straight}
    scales.discard(None)
    if len(scales) <= 1 and not any(s.overflowed for s in straight):
        raise ValueError(
            "assert_resume_matches: in the straight run no step overflowed and the loss scale "
            "stayed %s, so a restart that lost the loss-scale state would report the same steps "
            "and the check could not fail. Make a step overflow (a larger initial scale: "
            "init_loss_scale, GradScaler's init_scale, Keras's initial_scale) or the scale grow "
            "(a shorter interval: incr_every_n_steps, growth_interval, dynamic_growth_steps), "
            "before resume_at."
            % (scales.pop() if scales else "unknown"))


def _compare(step, want, got, restart):
    """Raises AssertionError when one step's outcomes differ (``restart``: steps before it)."""
    __tracebackhide__ = True  # pylint: disable=unused-variable
    names = list(want) + [name for name in got if name not in want]
    differ = [name for name in names
              if name not in want or name not in got or not _same(want[name], got[name])]
    if not differ:
        return
    shown = ", ".join("%s %r (straight) vs %r (resumed)"
                      % (name, want.get(name, "absent"), got.get(name, "absent"))
                      for name in differ)
    if step < restart:
        raise AssertionError(
            "the two runs differ at step %d, before the restart: %s. The training is not "
            "deterministic (an unseeded initialiser, shuffled data) or depends on until (a "
            "schedule, a slice of the data), so a restart's effect cannot be told apart."
            % (step, shown))
    raise AssertionError(
        "the resumed run differs from the straight run at step %d, the %s after the restart: "
        "%s. The loss-scale state did not survive the checkpoint: save the loss scale, its "
        "counters and the step counter (a Saver over every global variable, not only the "
        "trainable ones; the GradScaler or the Keras optimizer in a tf.train.Checkpoint) and "
        "restore them before the first step after the restart."
        % (step, _ordinal(step - restart + 1), shown))


def _ordinal(n):
    """first, second, third, 4th, ... 11th, 12th, 13th, ... 21st, 22nd, 23rd, 24th, ..."""
    if n <= 3:
        return ("first", "second", "third")[n - 1]
    last = {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return "%d%s" % (n, "th" if n % 100 in (11, 12, 13) else last)


__all__ = ["assert_resume_matches", "PER_PROCESS_KEYS"]
