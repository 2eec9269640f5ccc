"""The inner half of :class:`~npu_loss_scale.MegatronMixedPrecisionOptimizer`: the gradient
statistics Megatron logs (the global L2 norm, the count of zero entries) and
:class:`MegatronGradientProcessor`, which clips by global norm and steps float32 main copies of
float16/bfloat16 variables, copying them back into the model (see
:mod:`npu_loss_scale.optimizers.megatron` for the whole step)."""
import tensorflow as tf

from npu_loss_scale._internal import checks as _checks
from npu_loss_scale._internal import graphs as _graphs
from npu_loss_scale._internal.compat.ops import clip_by_global_norm
from npu_loss_scale._internal.compat.variables import Variable, key as variable_key

__all__ = ["MegatronGradientProcessor", "MAIN_PARAM_SUFFIX", "global_norm", "count_zeros"]

_LOW_PRECISION = (tf.float16, tf.bfloat16)
MAIN_PARAM_SUFFIX = "fp32_main"


def _values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _cast(grad, dtype):
    if grad is None or grad.dtype == dtype:
        return grad
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(tf.cast(grad.values, dtype), grad.indices, grad.dense_shape)
    return tf.cast(grad, dtype)


def global_norm(grads):
    """float32 global L2 norm of ``grads`` (None entries ignored; any floating dtype)."""
    grads = [_cast(g, tf.float32) for g in grads if g is not None]
    if not grads:
        return tf.zeros([], tf.float32)
    return tf.linalg.global_norm(grads)


def count_zeros(grads):
    """int64 number of zero entries in ``grads``, counted on the dense gradients.

    An ``IndexedSlices`` gradient counts the rows it does not touch as zeros, as the dense
    gradient would.
    """
    total = tf.zeros([], tf.int64)
    for g in grads:
        if g is None:
            continue
        dense = tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
        size = tf.size(dense, out_type=tf.int64)
        total += size - tf.math.count_nonzero(dense, dtype=tf.int64)
    return total


class MegatronGradientProcessor(tf.compat.v1.train.Optimizer):
    """Clipping and fp32 main parameters around an optimizer; meant as the inner optimizer.

    ``apply_gradients`` takes unscaled gradients (it runs inside NPULossScaleOptimizer's finite
    branch) and: casts the gradients of float16/bfloat16 variables to float32 and pairs them with
    the variables' float32 main copies; clips all gradients with ``tf.clip_by_global_norm`` when
    ``clip_grad > 0``; lets the wrapped optimizer apply them (slots such as Adam's ``m``/``v``
    belong to the main copies); then assigns each main copy, cast, to its model variable.

    The main copies are non-trainable float32 variables named ``<variable>/fp32_main``, created
    from the model variables' initial values (graph mode) or current values (eager); they are in
    the global-variables collection (``tf.compat.v1.train.Saver``) and tracked for
    ``tf.train.Checkpoint``. After loading the model without the optimizer state, call
    :meth:`reload_model_params`.

    Args:
      optimizer: a ``tf.compat.v1.train.Optimizer``.
      clip_grad: clip by global L2 norm to this value; 0 turns clipping off (Megatron's rule).
      main_params: keep float32 main copies of float16/bfloat16 variables (default True).
    """

    def __init__(self, optimizer, clip_grad=0.0, main_params=True, name=None):
        if not isinstance(optimizer, tf.compat.v1.train.Optimizer):
            raise TypeError("optimizer must be a tf.compat.v1.train.Optimizer (for example "
                            "tf.compat.v1.train.AdamOptimizer); got %r (type %s)"
                            % (optimizer, type(optimizer).__name__))
        self._clip_grad = _checks.real_number("clip_grad", clip_grad, minimum=0.0,
                                              accepted=">= 0 (0 turns clipping off)")
        self._use_main_params = _checks.boolean("main_params", main_params)
        super().__init__(use_locking=optimizer._use_locking,  # pylint: disable=protected-access
                         name=name or "Megatron_" + optimizer.get_name())
        self._opt = optimizer
        # Tracking the wrapped optimizer is deferred to _track_base_optimizer(): an
        # NPULossScaleOptimizer built around this object forwards unknown attributes to its inner
        # optimizer, and would adopt this object's dependency lists as its own if they already
        # existed while it initialises (it then fails on a duplicate "base_optimizer").
        self._base_tracked = False
        self._mains = _graphs.PerGraph("main_params")   # per graph: {var ref: (var, main)}

    @property
    def inner_optimizer(self):
        return self._opt

    def _track_base_optimizer(self):
        if not self._base_tracked:
            self._track_trackable(self._opt, "base_optimizer", overwrite=True)
            self._base_tracked = True

    @property
    def clip_grad(self):
        return self._clip_grad

    # -- main parameters --------------------------------------------------------------------
    def _main_table(self):
        """``{variable key: (model variable, main copy)}`` of the current outermost graph."""
        return self._mains.get(dict)

    def main_params(self):
        """``[(model_variable, float32 main copy)]`` in the current graph."""
        return list(self._main_table().values())

    def main_param(self, var):
        """The float32 main copy of ``var``, or None if it has none."""
        entry = self._main_table().get(variable_key(var))
        return entry[1] if entry is not None else None

    def build_main_params(self, var_list):
        """Creates main copies of the float16/bfloat16 variables of ``var_list`` (idempotent)."""
        self._track_base_optimizer()
        if not self._use_main_params:
            return []
        table = self._main_table()
        made = []
        for var in var_list:
            if var is None or var.dtype.base_dtype not in _LOW_PRECISION or variable_key(var) in table:
                continue
            base = var.name.split(":")[0]
            with tf.init_scope(), tf.control_dependencies(None):
                if tf.executing_eagerly():
                    initial = tf.cast(var, tf.float32)
                    main = Variable(initial, trainable=False, dtype=tf.float32,
                                    name=base + "/" + MAIN_PARAM_SUFFIX)
                else:
                    graph = tf.compat.v1.get_default_graph()
                    with graph.name_scope(None):
                        main = Variable(
                            tf.cast(var.initial_value, tf.float32), trainable=False,
                            dtype=tf.float32, name=base + "/" + MAIN_PARAM_SUFFIX)
            self._track_trackable(main, MAIN_PARAM_SUFFIX + "." + base.replace("/", "."),
                                  overwrite=True)
            table[variable_key(var)] = (var, main)
            made.append(main)
        return made

    def reload_model_params(self):
        """Copies the model variables (cast to float32) into their main copies.

        Eager: done at once, returns None. Graph mode: returns the op to run.
        """
        pairs = self.main_params()
        assigns = [main.assign(tf.cast(var, tf.float32)) for var, main in pairs]
        if tf.executing_eagerly():
            return None
        return tf.group(*assigns, name="reload_model_params")

    # -- Optimizer interface ----------------------------------------------------------------
    def compute_gradients(self, *args, **kwargs):
        return self._opt.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = [(g, v) for g, v in grads_and_vars]
        self.build_main_params([v for g, v in grads_and_vars if g is not None])
        table = self._main_table()
        pairs, copies = [], []
        for g, v in grads_and_vars:
            entry = table.get(variable_key(v)) if g is not None else None
            if entry is None:
                pairs.append((g, v))
            else:
                pairs.append((_cast(g, tf.float32), entry[1]))
                copies.append((v, entry[1]))    # the variable as this replica sees it
        if self._clip_grad > 0:
            present = [i for i, (g, _) in enumerate(pairs) if g is not None]
            grads = [pairs[i][0] for i in present]
            dtypes = {_values(g).dtype for g in grads}
            use_norm = None if len(dtypes) <= 1 else global_norm(grads)
            clipped, _ = clip_by_global_norm(grads, self._clip_grad, use_norm=use_norm)
            for i, g in zip(present, clipped):
                pairs[i] = (g, pairs[i][1])
        apply = self._opt.apply_gradients(pairs, global_step=global_step, name=name)
        if not copies:
            return apply
        with tf.control_dependencies([apply]):
            back = [var.assign(tf.cast(main, var.dtype.base_dtype), read_value=False)
                    for var, main in copies]
        return tf.group(apply, *back, name="copy_main_params_to_model")

    def get_slot(self, var, name):
        main = self.main_param(var)
        return self._opt.get_slot(main if main is not None else var, name)

    def get_slot_names(self):
        """None of its own: the slots are the inner optimizer's (see
        ``NPULossScaleOptimizer.get_slot_names``)."""
        return []

    def variables(self):
        return self._opt.variables() + [main for _, main in self.main_params()]

    def _apply_dense(self, grad, var):  # pragma: no cover - apply_gradients is overridden
        raise NotImplementedError

    def _resource_apply_dense(self, grad, handle):  # pragma: no cover
        raise NotImplementedError

    def _apply_sparse(self, grad, var):  # pragma: no cover
        raise NotImplementedError
