"""OptimizerParamScheduler: Megatron-Core's learning-rate and weight-decay scheduler for TensorFlow.

One scheduler anneals the learning rate (warmup, then constant, linear, cosine,
inverse-square-root or warmup-stable-decay) and increments the weight decay (constant, linear,
cosine) of every parameter group of an optimizer. The formulas live in
:mod:`npu_loss_scale.schedules.formulas`, shared by every evaluation path.

Two ways to drive it:

* **Graph mode** (``tf.compat.v1`` + Session/Estimator): hand it a
  :class:`~npu_loss_scale.schedules.ParamGroupOptimizer`. Each group's rate and weight decay are
  tensors of the scheduler's ``num_steps`` *variable*, read when the update is applied; the
  optimizer advances ``num_steps`` in the same apply. Wrapped in ``NPULossScaleOptimizer``, the
  apply runs only on finite steps, so a skipped step advances nothing. The scheduler's state is a
  handful of variables (``num_steps`` and the values the checkpoint rules compare), saved and
  restored by the model's own ``Saver``; :meth:`checkpoint_rules_hook` applies the rules after a
  restore.
* **Eager / plain Python**: :meth:`step` advances ``num_steps`` and sets ``'lr'`` and
  ``'weight_decay'`` on every group of ``optimizer.param_groups`` (any list of dicts);
  ``state_dict``/``load_state_dict`` save and restore it. ``get_lr``/``get_wd`` take any dict.

Example (graph mode, BERT-style groups)::

    import npu_loss_scale as nls
    opt = nls.ParamGroupOptimizer(
        lambda lr, group: tf.compat.v1.train.AdamOptimizer(lr, epsilon=1e-6),
        overrides=[("*LayerNorm*", nls.ParamGroupOverride(wd_mult=0.0)),
                   ("*bias", nls.ParamGroupOverride(wd_mult=0.0))])
    scheduler = nls.OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=1e-4, min_lr=0.0, lr_warmup_steps=20, lr_decay_steps=200,
        lr_decay_style="linear", start_wd=0.01, end_wd=0.01, wd_incr_steps=200,
        wd_incr_style="constant")
    opt = nls.NPULossScaleOptimizer(opt, manager)
    train_op = opt.minimize(loss, global_step=tf.compat.v1.train.get_or_create_global_step())

Example (formulas only)::

    s = nls.OptimizerParamScheduler(None, init_lr=0.0, max_lr=1.0, min_lr=0.1,
                                    lr_warmup_steps=10, lr_decay_steps=110,
                                    lr_decay_style="linear", start_wd=0.0, end_wd=0.1,
                                    wd_incr_steps=100, wd_incr_style="linear")
    s.step(60)
    s.get_lr({}), s.get_lr({"max_lr": 2.0}), s.get_wd({})     # 0.55, 1.05, 0.06
"""
from npu_loss_scale._internal import checks as _checks
from npu_loss_scale.schedules import formulas
from npu_loss_scale.schedules import scheduler_values
from npu_loss_scale.schedules.scheduler_graph import GraphMode

#: The values a checkpoint holds besides ``num_steps`` and that the checkpoint rules compare,
#: with the names Megatron's messages use for them.
COMPARED = (
    ("max_lr", "learning rate"),
    ("min_lr", "minimum learning rate"),
    ("lr_warmup_steps", "warmup iterations"),
    ("lr_decay_steps", "total number of iterations"),
    ("lr_decay_style", "learning rate decay style"),
    ("start_wd", "start weight decay"),
    ("end_wd", "end weight decay"),
    ("wd_incr_steps", "total number of weight decay iterations"),
    ("wd_incr_style", "weight decay incr style"),
)
class OptimizerParamScheduler(GraphMode):
    """Anneals the learning rate and increments the weight decay of every parameter group.

    Args (Megatron-Core's; steps count *applied* updates):
      optimizer: a :class:`~npu_loss_scale.schedules.ParamGroupOptimizer` (graph and eager),
        any object with a ``param_groups`` list of dicts (eager: :meth:`step` sets ``'lr'`` and
        ``'weight_decay'`` on each), or ``None`` (formulas only).
      init_lr: rate at step 0 of warmup (``0 <= init_lr <= max_lr``).
      max_lr: peak rate at the end of warmup (``>= min_lr``).
      min_lr: floor reached at ``lr_decay_steps`` (``>= 0``).
      lr_warmup_steps: linear warmup steps (``>= 0``, ``< lr_decay_steps``).
      lr_decay_steps: the step where decay ends, counted from 0, warmup included (``> 0``).
      lr_decay_style: ``'constant'``, ``'linear'``, ``'cosine'``, ``'inverse-square-root'`` or
        ``'WSD'``. ``'constant'`` stays at ``max_lr`` forever; every other style gives
        ``min_lr`` past ``lr_decay_steps``.
      start_wd, end_wd: weight decay at step 0 and from ``wd_incr_steps`` on
        (``0 <= start_wd <= end_wd``; equal for ``'constant'``).
      wd_incr_steps: steps of the weight-decay increment (``>= 1`` unless ``'constant'``).
      wd_incr_style: ``'constant'``, ``'linear'`` or ``'cosine'``.
      use_checkpoint_opt_param_scheduler: on :meth:`load_state_dict` (or a graph restore), the
        checkpoint's values win.
      override_opt_param_scheduler: the constructor's values win. Setting it with
        ``use_checkpoint_opt_param_scheduler=True`` (the default!) is an error, as in
        Megatron: pass ``use_checkpoint_opt_param_scheduler=False`` with it. With neither, a
        checkpoint value that differs from the constructor's is an error naming it.
      wsd_decay_steps: ``'WSD'`` only: the length of the final annealing phase, the last
        ``wsd_decay_steps`` steps before ``lr_decay_steps`` (``0 <= . <= lr_decay_steps``).
      lr_wsd_decay_style: ``'WSD'`` only: how the rate anneals in that phase,
        ``'linear'``, ``'cosine'``, ``'exponential'`` or ``'minus_sqrt'``.

    ``wd_mult`` of a group multiplies its weight decay when :meth:`step` (or the graph apply)
    sets it on the group; :meth:`get_wd` returns the value before it, as in Megatron.
    """

    def __init__(self, optimizer, init_lr, max_lr, min_lr, lr_warmup_steps, lr_decay_steps,
                 lr_decay_style, start_wd, end_wd, wd_incr_steps, wd_incr_style,
                 use_checkpoint_opt_param_scheduler=True, override_opt_param_scheduler=False,
                 wsd_decay_steps=None, lr_wsd_decay_style=None):
        self.optimizer = optimizer
        self.init_lr = _checks.real_number("init_lr", init_lr, minimum=0.0)
        self.max_lr = _checks.real_number("max_lr", max_lr, minimum=0.0)
        self.min_lr = _checks.real_number("min_lr", min_lr, minimum=0.0)
        self.lr_warmup_steps = scheduler_values.steps("lr_warmup_steps", lr_warmup_steps)
        self.lr_decay_steps = scheduler_values.steps("lr_decay_steps", lr_decay_steps, minimum=1)
        self.lr_decay_style = _checks.one_of("lr_decay_style", lr_decay_style,
                                             formulas.LR_DECAY_STYLES)
        self.start_wd = _checks.real_number("start_wd", start_wd, minimum=0.0)
        self.end_wd = _checks.real_number("end_wd", end_wd, minimum=0.0)
        self.wd_incr_steps = scheduler_values.steps("wd_incr_steps", wd_incr_steps)
        self.wd_incr_style = _checks.one_of("wd_incr_style", wd_incr_style,
                                            formulas.WD_INCR_STYLES)
        self.use_checkpoint_opt_param_scheduler = _checks.boolean(
            "use_checkpoint_opt_param_scheduler", use_checkpoint_opt_param_scheduler)
        self.override_opt_param_scheduler = _checks.boolean(
            "override_opt_param_scheduler", override_opt_param_scheduler)
        if override_opt_param_scheduler and use_checkpoint_opt_param_scheduler:
            raise ValueError(
                "override_opt_param_scheduler=True and use_checkpoint_opt_param_scheduler=True "
                "are both set (use_checkpoint_opt_param_scheduler defaults to True): choose one. "
                "To let the constructor's values win, pass "
                "use_checkpoint_opt_param_scheduler=False with override_opt_param_scheduler=True")
        self.wsd_decay_steps = None if wsd_decay_steps is None else scheduler_values.steps(
            "wsd_decay_steps", wsd_decay_steps)
        self.lr_wsd_decay_style = None if lr_wsd_decay_style is None else _checks.one_of(
            "lr_wsd_decay_style", lr_wsd_decay_style, formulas.WSD_DECAY_STYLES)
        self._check_consistency("")
        self.num_steps = 0
        self._graph_state = None     # a PerGraph, made on first graph use (TensorFlow lazily)
        if optimizer is not None:
            attach = getattr(optimizer, "_attach_scheduler", None)
            if attach is not None:
                attach(self)
            elif not hasattr(optimizer, "param_groups"):
                raise TypeError("optimizer must be a ParamGroupOptimizer, an object with a "
                                "param_groups list of dicts, or None; got %r (type %s)"
                                % (optimizer, type(optimizer).__name__))
        self.step(0)

    def _check_consistency(self, source):
        """Cross-argument rules; ``source`` says where the values came from (for messages)."""
        where = " (%s)" % source if source else ""
        if self.min_lr > self.max_lr:
            raise ValueError("min_lr must be <= max_lr (%r); got %r%s"
                             % (self.max_lr, self.min_lr, where))
        if self.init_lr > self.max_lr:
            raise ValueError("init_lr must be <= max_lr (%r); got %r%s"
                             % (self.max_lr, self.init_lr, where))
        if self.lr_warmup_steps >= self.lr_decay_steps:
            raise ValueError("lr_warmup_steps must be < lr_decay_steps (%d); got %d%s"
                             % (self.lr_decay_steps, self.lr_warmup_steps, where))
        if self.start_wd > self.end_wd:
            raise ValueError("start_wd must be <= end_wd (%r); got %r%s"
                             % (self.end_wd, self.start_wd, where))
        if self.wd_incr_style == "constant" and self.start_wd != self.end_wd:
            raise ValueError("wd_incr_style='constant' needs start_wd == end_wd; got start_wd=%r, "
                             "end_wd=%r%s" % (self.start_wd, self.end_wd, where))
        if self.wd_incr_style != "constant" and self.wd_incr_steps < 1:
            raise ValueError("wd_incr_steps must be an integer >= 1 for wd_incr_style=%r; got "
                             "%d%s" % (self.wd_incr_style, self.wd_incr_steps, where))
        if self.lr_decay_style == "WSD":
            if self.wsd_decay_steps is None:
                raise ValueError("wsd_decay_steps is required for lr_decay_style='WSD' (the "
                                 "length of the final annealing phase, an integer in [0, "
                                 "lr_decay_steps=%d]); got None%s" % (self.lr_decay_steps, where))
            if self.wsd_decay_steps > self.lr_decay_steps:
                raise ValueError("wsd_decay_steps must be <= lr_decay_steps (%d); got %d%s"
                                 % (self.lr_decay_steps, self.wsd_decay_steps, where))
            if self.lr_wsd_decay_style is None:
                raise ValueError("lr_wsd_decay_style is required for lr_decay_style='WSD': one "
                                 "of %s; got None%s" % (", ".join(
                                     repr(s) for s in formulas.WSD_DECAY_STYLES), where))

    def __repr__(self):
        return ("OptimizerParamScheduler(num_steps=%d, lr_decay_style=%r, max_lr=%r, min_lr=%r, "
                "lr_warmup_steps=%d, lr_decay_steps=%d, wd %r->%r %s over %d)"
                % (self.num_steps, self.lr_decay_style, self.max_lr, self.min_lr,
                   self.lr_warmup_steps, self.lr_decay_steps, self.start_wd, self.end_wd,
                   self.wd_incr_style, self.wd_incr_steps))

    # -- the formulas on Python numbers ---------------------------------------------------------
    def _lr_args(self, param_group, values=None):
        values = values or self.__dict__
        param_group = param_group if param_group is not None else {}
        return dict(init_lr=self.init_lr,
                    max_lr=param_group.get("max_lr", values["max_lr"]),
                    min_lr=param_group.get("min_lr", values["min_lr"]),
                    lr_warmup_steps=values["lr_warmup_steps"],
                    lr_decay_steps=values["lr_decay_steps"],
                    lr_decay_style=values["lr_decay_style"],
                    wsd_decay_steps=self.wsd_decay_steps,
                    lr_wsd_decay_style=self.lr_wsd_decay_style)

    def _wd_args(self, param_group, values=None):
        values = values or self.__dict__
        param_group = param_group if param_group is not None else {}
        return dict(start_wd=param_group.get("start_wd", values["start_wd"]),
                    end_wd=param_group.get("end_wd", values["end_wd"]),
                    wd_incr_steps=values["wd_incr_steps"],
                    wd_incr_style=values["wd_incr_style"])

    def get_lr(self, param_group):
        """The learning rate of ``param_group`` (a dict; ``max_lr``/``min_lr`` read from it when
        present) at the current :attr:`num_steps`, as a Python float."""
        scheduler_values.check_group(param_group, allow_none=False)
        return formulas.learning_rate(formulas.PY, self.num_steps,
                                      **self._lr_args(param_group))

    def get_wd(self, param_group=None):
        """The weight decay of ``param_group`` (``start_wd``/``end_wd`` read from it when
        present) at the current :attr:`num_steps`, before its ``wd_mult``."""
        scheduler_values.check_group(param_group, allow_none=True)
        args = self._wd_args(param_group)
        if args["wd_incr_style"] == "constant" and args["start_wd"] != args["end_wd"]:
            raise ValueError("wd_incr_style='constant' needs start_wd == end_wd; the param group "
                             "gives start_wd=%r, end_wd=%r" % (args["start_wd"], args["end_wd"]))
        return formulas.weight_decay(formulas.PY, self.num_steps, **args)

    def step(self, increment):
        """Advances :attr:`num_steps` by ``increment`` (>= 0) and sets ``'lr'`` and
        ``'weight_decay'`` (``get_wd * wd_mult``) on every group of ``optimizer.param_groups``.

        Call it after each *applied* update (not after a skipped one). In graph mode the
        :class:`ParamGroupOptimizer` advances the ``num_steps`` variable itself."""
        self.num_steps += scheduler_values.steps("increment", increment)
        for group in self._param_groups():
            self.set_group(group)

    def set_group(self, group):
        """Sets ``group['lr']`` and ``group['weight_decay']`` at the current step."""
        group["lr"] = self.get_lr(group)
        group["weight_decay"] = self.get_wd(group) * group.get("wd_mult", 1.0)

    def _param_groups(self):
        if self.optimizer is None:
            return []
        return list(getattr(self.optimizer, "param_groups", None) or [])

    # -- checkpoints ----------------------------------------------------------------------------
    def state_dict(self, session=None):
        """``num_steps`` and the values the checkpoint rules compare (Megatron's keys); not
        ``init_lr`` nor the WSD settings.

        Graph mode: pass the ``session`` to read them from the graph's variables (the Python
        state is synced to them first; without it the Python state is returned)."""
        if session is not None:
            values = session.run(self._graph_vars())
            self.__dict__.update({key: scheduler_values.normalise(key, value.item() if hasattr(value, "item")
                                                  else value) for key, value in values.items()})
            self.step(0)
        state = {key: getattr(self, key) for key, _ in COMPARED}
        state["num_steps"] = self.num_steps
        return state

    def _check_and_set(self, key, label, own, saved):
        if self.override_opt_param_scheduler:
            return own
        if not self.use_checkpoint_opt_param_scheduler and own != saved:
            raise ValueError(
                "OptimizerParamScheduler: the constructor's %s (%s) is %r but the checkpoint "
                "holds %r. Pass override_opt_param_scheduler=True (with "
                "use_checkpoint_opt_param_scheduler=False) to keep the constructor's values, or "
                "use_checkpoint_opt_param_scheduler=True to take the checkpoint's"
                % (key, label, own, saved))
        return saved

    def load_state_dict(self, state_dict):
        """Restores ``num_steps`` and resolves each compared value by the checkpoint rules:
        ``override_opt_param_scheduler`` -> the constructor's value; otherwise
        ``use_checkpoint_opt_param_scheduler`` -> the checkpoint's; neither -> a difference is a
        ``ValueError`` naming the value. The weight-decay values are optional in ``state_dict``
        (older checkpoints). Then sets every group's rate and weight decay.

        Every value of ``state_dict`` is checked first (styles against the accepted names,
        rates and weight decays finite and >= 0, step counts integers >= 0), whichever rule
        applies; a refused state dict (or one whose values do not fit together) raises naming
        the key, the value and what is accepted, and leaves the scheduler and its parameter
        groups as they were."""
        if not isinstance(state_dict, dict):
            raise TypeError("state_dict must be a dict (from state_dict()); got %r (type %s)"
                            % (state_dict, type(state_dict).__name__))
        required = [key for key, _ in COMPARED if key not in scheduler_values.WD_KEYS] + ["num_steps"]
        missing = [key for key in required if key not in state_dict]
        has_wd = "start_wd" in state_dict
        if has_wd:
            missing += [key for key in scheduler_values.WD_KEYS if key not in state_dict]
        if missing:
            raise KeyError("state_dict lacks %s (keys of OptimizerParamScheduler.state_dict()); "
                           "got keys %s" % (", ".join(missing), sorted(state_dict)))
        # 1. every value on its own, before any rule or any change
        saved = {key: scheduler_values.normalise(key, state_dict[key])
                 for key, _ in COMPARED if has_wd or key not in scheduler_values.WD_KEYS}
        num_steps = scheduler_values.normalise("num_steps", state_dict["num_steps"])
        # 2. the checkpoint rules
        resolved = {key: self._check_and_set(key, label, getattr(self, key), saved[key])
                    for key, label in COMPARED if key in saved}
        # 3. commit; on any failure (values that do not fit together, a group the formulas
        #    refuse) restore the previous state and the groups' rates
        previous = {key: getattr(self, key) for key in resolved}
        previous["num_steps"] = self.num_steps
        groups = self._param_groups()
        previous_groups = [{k: group[k] for k in ("lr", "weight_decay") if k in group}
                           for group in groups]
        try:
            self.__dict__.update(resolved)
            self._check_consistency("after loading a checkpoint")
            self.num_steps = num_steps
            self.step(0)
        except Exception:
            self.__dict__.update(previous)
            for group, values in zip(groups, previous_groups):
                group.pop("lr", None)
                group.pop("weight_decay", None)
                group.update(values)
            raise


__all__ = [
    "COMPARED", "OptimizerParamScheduler",
]
