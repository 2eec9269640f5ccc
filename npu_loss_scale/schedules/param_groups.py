"""ParamGroupOptimizer: parameter groups, scheduled rates and decoupled weight decay for
``tf.compat.v1.train`` optimizers.

The TensorFlow counterpart of a PyTorch optimizer's ``param_groups``. Variables are put into
groups by override keys, as Megatron-Core does with its ``ParamKey`` -> ``ParamGroupOverride``
map: every key that matches a variable contributes its override, the matching overrides are
combined (:func:`combine_param_group_overrides`, conflicting values raise) and variables with the
same combined override share a group; variables no key matches form the default group. Each
group gets its own inner optimizer, built by ``optimizer_fn(learning_rate, group)``.

One ``apply_gradients`` of this optimizer, for each group (graph mode):

1. ``lr`` and ``wd = get_wd(group) * wd_mult`` are tensors of the attached
   :class:`OptimizerParamScheduler`'s ``num_steps`` variable;
2. decoupled weight decay (AdamW style, as ``torch.optim.AdamW``): ``var -= lr * wd * var`` for
   every variable of the group that has a gradient, after the gradients were computed;
3. then the group's inner optimizer applies the gradients with learning rate ``lr``;
4. after every group: ``num_steps += increment`` and ``global_step += 1``.

So all groups update together in one apply, under one decision of an enclosing
``NPULossScaleOptimizer``: it calls this ``apply_gradients`` only on a finite step (with the
gradients unscaled), and on a skipped step nothing of the above runs, the schedule included.

Composition: wrap this optimizer, never the other way round. Gradient averaging
(``hvd.DistributedOptimizer``) goes between it and ``NPULossScaleOptimizer``; clipping goes
between ``compute_gradients`` and ``apply_gradients`` of the outermost optimizer (or in a
clipping wrapper around this one); gradient accumulation that calls the inner
``apply_gradients`` once per accumulated update advances the schedule once per update. ``tf.distribute`` strategies are not supported (an
error says so): their replica-local applies would need replica-aware weight decay and counters.

In eager mode the groups' rates and weight decays are the Python values
:meth:`OptimizerParamScheduler.step` sets on :attr:`param_groups`; call ``step(1)`` after each
applied update.

Keys of ``overrides``: a glob on the variable's name without ``:0`` (``"*LayerNorm*"``,
``"*/bias"``), a callable ``f(variable) -> bool``, or a tuple/list of keys (any may match).
"""
import fnmatch

import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale.schedules.overrides import (
    check_override, combine_param_group_overrides, param_group_override_to_tuple)


def _var_name(var):
    name = getattr(var, "name", "") or ""
    return name[:-2] if name.endswith(":0") else name


def _matches(key, var):
    if isinstance(key, str):
        return fnmatch.fnmatchcase(_var_name(var), key)
    if isinstance(key, (tuple, list)):
        return any(_matches(k, var) for k in key)
    return bool(key(var))


def _check_key(key, where):
    if isinstance(key, (tuple, list)):
        if not key:
            raise ValueError("%s: an empty tuple/list of keys matches nothing" % where)
        for k in key:
            _check_key(k, where)
    elif not (isinstance(key, str) or callable(key)):
        raise TypeError("%s: a key must be a glob string on variable names, a callable "
                        "f(variable) -> bool, or a tuple/list of those; got %r (type %s)"
                        % (where, key, type(key).__name__))


class ParamGroupOptimizer(tf.compat.v1.train.Optimizer):
    """Per-group inner optimizers with scheduled learning rate and decoupled weight decay.

    Args:
      optimizer_fn: ``optimizer_fn(learning_rate, group)`` -> a ``tf.compat.v1.train``
        optimizer for one group. ``learning_rate`` is a callable the inner optimizer reads when
        it applies; ``group`` is the group's dict (its override keys, ``'params'``,
        ``'default_config'``), so a factory may read extra keys such as ``group.get('eps')``.
      overrides: a list of ``(key, ParamGroupOverride)`` pairs, or a dict ``{key: override}``.
      increment: how much one applied update advances the scheduler's ``num_steps`` (1; a batch
        size when the schedule counts samples).
      name: the optimizer's name.

    Example::

        opt = nls.ParamGroupOptimizer(
            lambda lr, group: tf.compat.v1.train.AdamOptimizer(lr),
            overrides=[(("*LayerNorm*", "*bias"), nls.ParamGroupOverride(wd_mult=0.0)),
                       ("*embeddings*", nls.ParamGroupOverride(max_lr=1e-5, min_lr=0.0))])
        scheduler = nls.OptimizerParamScheduler(opt, init_lr=0.0, max_lr=1e-4, ...)
        train_op = nls.NPULossScaleOptimizer(opt, manager).minimize(loss, global_step=step)
    """

    def __init__(self, optimizer_fn, overrides=None, increment=1, name="ParamGroups"):
        if not callable(optimizer_fn):
            raise TypeError("optimizer_fn must be a callable (learning_rate, group) -> a "
                            "tf.compat.v1.train.Optimizer; got %r (type %s)"
                            % (optimizer_fn, type(optimizer_fn).__name__))
        if overrides is None:
            overrides = []
        elif isinstance(overrides, dict):
            overrides = list(overrides.items())
        else:
            overrides = list(overrides)
        for i, pair in enumerate(overrides):
            where = "overrides[%d]" % i
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise TypeError("%s must be a (key, ParamGroupOverride) pair; got %r" % (where, pair))
            _check_key(pair[0], where)
            if not isinstance(pair[1], dict):
                raise TypeError("%s: the override must be a ParamGroupOverride dict; got %r "
                                "(type %s)" % (where, pair[1], type(pair[1]).__name__))
            check_override(pair[1], where)
        increment = _checks.positive_int("increment", increment)
        super().__init__(use_locking=False, name=name)
        self._optimizer_fn = optimizer_fn
        self._overrides = overrides
        self._increment = increment
        self._scheduler = None
        self._groups = []            # dicts, in creation order (default group first)
        self._group_of_key = {}      # override tuple (or None) -> group dict
        self._inner = {}             # id(group) -> inner optimizer
        self._lr_now = {}            # id(group) -> the rate the inner optimizer reads now

    # -- groups --------------------------------------------------------------------------------
    def _attach_scheduler(self, scheduler):
        if self._scheduler is not None and self._scheduler is not scheduler:
            raise ValueError("this ParamGroupOptimizer already has an OptimizerParamScheduler")
        self._scheduler = scheduler

    @property
    def scheduler(self):
        return self._scheduler

    @property
    def param_groups(self):
        """The groups (dicts) built so far: override keys, ``'params'`` (variables),
        ``'default_config'`` (no override), and ``'lr'``/``'weight_decay'`` as last set by
        :meth:`OptimizerParamScheduler.step`."""
        return list(self._groups)

    def override_for(self, var):
        """The combined override of ``var`` (``None``: no key matches, the default group)."""
        matched = [override for key, override in self._overrides if _matches(key, var)]
        return combine_param_group_overrides(matched) if matched else None

    def add_variables(self, var_list):
        """Puts variables into their groups now (``apply_gradients`` does it for new ones)."""
        for var in var_list:
            self._group_for(var)
        return self.param_groups

    def _group_for(self, var):
        for group in self._groups:
            if any(v is var for v in group["params"]):
                return group
        override = self.override_for(var)
        key = param_group_override_to_tuple(override)
        group = self._group_of_key.get(key)
        if group is None:
            group = dict(override or {})
            group["params"] = []
            group["default_config"] = override is None
            if self._scheduler is not None:
                self._scheduler.set_group(group)
            self._group_of_key[key] = group
            self._groups.append(group)
        group["params"].append(var)
        return group

    def _inner_for(self, group):
        inner = self._inner.get(id(group))
        if inner is None:
            gid = id(group)
            inner = self._optimizer_fn(lambda: self._lr_now[gid], group)
            if not isinstance(inner, tf.compat.v1.train.Optimizer):
                raise TypeError("optimizer_fn must return a tf.compat.v1.train.Optimizer; got "
                                "%r (type %s)" % (inner, type(inner).__name__))
            self._inner[gid] = inner
        return inner

    # -- applying ------------------------------------------------------------------------------
    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """Weight decay then each group's inner update, then the counters (see the module
        docstring). Variables with a ``None`` gradient are left alone."""
        if self._scheduler is None:
            raise RuntimeError("ParamGroupOptimizer needs an OptimizerParamScheduler: create "
                               "OptimizerParamScheduler(this_optimizer, ...) before applying")
        if tf.distribute.has_strategy():
            raise NotImplementedError(
                "ParamGroupOptimizer does not support tf.distribute strategies (its weight decay "
                "and counters are not replica-aware); average gradients with "
                "hvd.DistributedOptimizer between it and NPULossScaleOptimizer instead")
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        if not pairs:
            raise ValueError("no gradients provided for any variable: %s"
                             % [_var_name(v) for _, v in grads_and_vars])
        by_group = []
        for grad, var in pairs:
            group = self._group_for(var)
            for entry in by_group:
                if entry[0] is group:
                    entry[1].append((grad, var))
                    break
            else:
                by_group.append((group, [(grad, var)]))
        eager = tf.executing_eagerly()
        with tf.name_scope(name or self.get_name()):
            grads = [g.values if isinstance(g, tf.IndexedSlices) else g for g, _ in pairs]
            decays = []
            with tf.control_dependencies(None if eager else grads):
                for group, group_pairs in by_group:
                    if eager:
                        lr, wd = group["lr"], group["weight_decay"]
                        self._lr_now[id(group)] = lr
                    else:
                        lr = tf.cast(self._scheduler.lr_tensor(group), tf.float32,
                                     name="learning_rate")
                        wd = tf.cast(self._scheduler.wd_tensor(group)
                                     * float(group.get("wd_mult", 1.0)), tf.float32,
                                     name="weight_decay")
                        self._lr_now[id(group)] = lr
                    if float(group.get("wd_mult", 1.0)) != 0.0:   # no ops for no decay
                        decays += self._decay(group_pairs, lr, wd, eager)
            with tf.control_dependencies(decays if not eager else None):
                updates = [self._inner_for(group).apply_gradients(group_pairs)
                           for group, group_pairs in by_group]
            if eager:
                if global_step is not None:
                    global_step.assign_add(1)
                return None
            with tf.control_dependencies(updates):
                counters = [self._scheduler.advance(self._increment)]
                if global_step is not None:
                    counters.append(tf.compat.v1.assign_add(global_step, 1))
            return tf.group(*counters, name="apply")

    @staticmethod
    def _decay(group_pairs, lr, wd, eager):
        if eager and float(lr) * float(wd) == 0.0:
            return []
        ops = []
        for _, var in group_pairs:
            factor = tf.cast(lr * wd, var.dtype.base_dtype)
            ops.append(var.assign_sub(factor * var.read_value() if hasattr(var, "read_value")
                                      else factor * var, read_value=False))
        return ops

    # -- state of the inner optimizers ---------------------------------------------------------
    def variables(self):
        out = []
        for inner in self._inner.values():
            out += inner.variables()
        return out

    def get_slot(self, var, name):
        for group in self._groups:
            if any(v is var for v in group["params"]):
                inner = self._inner.get(id(group))
                return inner.get_slot(var, name) if inner is not None else None
        return None

    def get_slot_names(self):
        names = set()
        for inner in self._inner.values():
            names.update(inner.get_slot_names())
        return sorted(names)

    # Optimizer's abstract methods: never reached, apply_gradients is overridden.
    def _apply_dense(self, grad, var):
        raise RuntimeError("ParamGroupOptimizer applies through its groups' optimizers")

    _resource_apply_dense = _apply_sparse = _resource_apply_sparse = _apply_dense


__all__ = [
    "ParamGroupOptimizer",
]
