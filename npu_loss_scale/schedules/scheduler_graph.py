"""The graph-mode half of :class:`~npu_loss_scale.schedules.OptimizerParamScheduler`: its state as
variables of the graph being built (one set per graph, saved by the model's own ``Saver``), the
rate and weight-decay tensors read from them, the ``num_steps`` advance of an applied step, and
the checkpoint rules applied once a session restored them."""
from npu_loss_scale.schedules import formulas
from npu_loss_scale.schedules import scheduler_values


class GraphMode:
    """Graph-mode methods of the scheduler; the class using it provides ``state_dict``,
    ``load_state_dict``, ``_lr_args``, ``_wd_args`` and a ``_graph_state`` attribute."""

    def _graph_vars(self):
        """The scheduler's variables in the current graph (created once per graph)."""
        import tensorflow as tf

        if tf.executing_eagerly():
            raise RuntimeError("OptimizerParamScheduler's graph variables exist in graph mode "
                               "only; in eager mode drive it with step() and save state_dict()")
        if self._graph_state is None:
            from npu_loss_scale._internal import graphs  # pylint: disable=import-outside-toplevel
            self._graph_state = graphs.PerGraph("opt_param_scheduler")
        # The outermost graph's (a cond/while branch shares it), created once per graph.
        variables = self._graph_state.get(dict)
        if not variables:
            made = {}
            with tf.init_scope(), tf.control_dependencies(None), \
                    tf.name_scope("opt_param_scheduler"):
                for key, value in self.state_dict().items():
                    if key in scheduler_values.FLOATS:
                        dtype = tf.float64
                    elif key in scheduler_values.STRINGS:
                        dtype = tf.string
                    else:
                        dtype = tf.int64
                    made[key] = tf.compat.v1.Variable(
                        tf.constant(value, dtype), name=key, trainable=False, use_resource=True,
                        collections=[tf.compat.v1.GraphKeys.GLOBAL_VARIABLES])
            variables.update(made)      # all or none: a failed creation is tried again
        return variables

    def variables(self):
        """The scheduler's variables in the current graph: ``num_steps`` and the compared values
        (saved by a plain ``Saver`` with the model)."""
        return list(self._graph_vars().values())

    @property
    def num_steps_variable(self):
        """int64 variable: applied steps in the current graph (advanced by ParamGroupOptimizer)."""
        return self._graph_vars()["num_steps"]

    def _graph_values(self):
        return {key: var for key, var in self._graph_vars().items()}

    def lr_tensor(self, param_group=None, num_steps=None):
        """float64 tensor: the learning rate of ``param_group`` (a dict, default: none) at
        ``num_steps`` (default: the ``num_steps`` variable), read from the scheduler's variables
        when it runs."""
        scheduler_values.check_group(param_group, allow_none=True)
        values = self._graph_values()
        step = values["num_steps"] if num_steps is None else num_steps
        return formulas.learning_rate(formulas.tf_ops(), step,
                                      **self._lr_args(param_group, values))

    def wd_tensor(self, param_group=None, num_steps=None):
        """float64 tensor: the weight decay of ``param_group`` before ``wd_mult`` (as
        :meth:`get_wd`)."""
        scheduler_values.check_group(param_group, allow_none=True)
        values = self._graph_values()
        step = values["num_steps"] if num_steps is None else num_steps
        return formulas.weight_decay(formulas.tf_ops(), step,
                                     **self._wd_args(param_group, values))

    def advance(self, increment=1):
        """Graph op: ``num_steps += increment`` (ParamGroupOptimizer runs it on applied steps)."""
        import tensorflow as tf
        return tf.compat.v1.assign_add(self.num_steps_variable,
                                       tf.constant(scheduler_values.steps("increment", increment), tf.int64))

    def apply_checkpoint_rules(self, session):
        """Graph mode, after the variables were restored from a checkpoint (or initialised):
        reads them, applies the rules of :meth:`load_state_dict` (raising on a mismatch when
        neither flag is set), writes the resolved values back and syncs the Python state."""
        variables = self._graph_vars()
        saved = session.run(variables)
        saved = {key: (value.decode() if isinstance(value, bytes) else value.item())
                 for key, value in saved.items()}
        self.load_state_dict(saved)
        resolved = self.state_dict()
        for key, var in variables.items():
            if resolved[key] != saved[key]:
                var.load(resolved[key], session)

    def checkpoint_rules_hook(self):
        """A ``SessionRunHook`` that calls :meth:`apply_checkpoint_rules` once the session exists
        (after the Estimator / MonitoredSession restored the checkpoint). Build it in the graph
        of the train op (in the ``model_fn``)."""
        import tensorflow as tf

        self._graph_vars()
        scheduler = self

        class _CheckpointRulesHook(tf.compat.v1.train.SessionRunHook):
            def after_create_session(self, session, coord):  # pylint: disable=unused-argument
                scheduler.apply_checkpoint_rules(session)

        return _CheckpointRulesHook()


__all__ = ["GraphMode"]
