"""``tf.train.Checkpoint`` restores of an object's state variables, all or nothing.

TensorFlow restores a checkpoint one variable at a time, so a wrong-shaped value would be refused
after the values restored before it were assigned. :class:`StagedState` holds every value of one
restore back until all have arrived and checks them together (the managers, the Megatron scalers,
GradScaler, Keras 2's optimizer); :class:`StagedList` and :func:`refuse_pending` extend it to
state variables tracked twice and made late (Keras 3's optimizer). Values out of range are not
refused here: :func:`npu_loss_scale._internal.state_io.restored_state_check` refuses them at the
owner's first step.
"""

import numpy as np
import tensorflow as tf

from npu_loss_scale._internal import state_io
from npu_loss_scale._internal.compat import tracking


class StagedState:
    """Restores an object's state variables from a ``tf.train.Checkpoint`` all or nothing.

    TensorFlow restores a checkpoint one variable at a time and checks a value's shape only
    when it assigns it, so a wrong-shaped value is refused after the variables restored before
    it have taken their checkpoint values. An owner that lists :attr:`children` as its
    checkpoint children in place of its variables (see :class:`StagedChildren`) has every value
    of one restore held back until all of them have arrived; their shapes are checked together,
    then all are assigned, or the restore raises ``ValueError`` with none assigned.

    ``children`` are saved under the variables' own keys and with their own savers, so the
    checkpoints written and read are the same as before. One restore is one TensorFlow restore
    uid: the owner announces the children it hands out for that uid (:meth:`expect`) and the
    last of them to arrive applies them all. A child restored alone (no announcement: a
    name-based restore into an object graph, say) is checked and applied on its own.
    Values out of range (a NaN scale...) are not refused here: the owner's first step refuses
    them, as it does after a name-based ``Saver`` restore.
    """

    def __init__(self, owner_name, named, tracked=None):
        self._owner_name = owner_name
        self.variables = dict(named)
        self.children = {name: _StagedVariable(self, name) for name in named}
        # name -> the object the owner tracks for it, when not the variable itself (Keras 3's
        # optimizer tracks a Keras variable around the TensorFlow one)
        self._tracked = {name: (tracked or {}).get(name, var) for name, var in named.items()}
        self._expected = {}      # restore uid -> names announced
        self._staged = {}        # restore uid -> {name: (saveable, tensors, shapes)}

    def name_of(self, tracked):
        """The name of the state variable the owner tracks as ``tracked``; None if none."""
        return next((name for name, obj in self._tracked.items() if obj is tracked), None)

    def restore_deferred(self, holders):
        """Restores, all or nothing, what a checkpoint read before the variables existed holds
        for them. ``holders`` are ``(trackable, {local name: state variable name})``: where the
        restore left its positions (``_deferred_dependencies``) for lack of the variables. Every
        position is announced first, then each is restored into its child."""
        for holder, names in holders:
            holder._maybe_initialize_trackable()  # pylint: disable=protected-access
            for local, name in names.items():
                for position in holder._deferred_dependencies.get(local, ()):  # pylint: disable=protected-access
                    self.expect(name, position.checkpoint.restore_uid)
        for holder, names in holders:
            for local, name in names.items():
                holder._handle_deferred_dependencies(name=local, trackable=self.children[name])  # pylint: disable=protected-access

    def expect(self, name, uid):
        """The child ``name`` was handed to the restore with uid ``uid``."""
        self._expected.setdefault(uid, set()).add(name)

    def stage(self, name, uid, saveable, tensors, shapes):
        """One child's restored value: applies the whole restore when it is the last."""
        expected = self._expected.get(uid, ())
        if name not in expected:
            return self._apply({name: (saveable, tensors, shapes)})
        staged = self._staged.setdefault(uid, {})
        staged[name] = (saveable, tensors, shapes)
        if not expected <= set(staged):
            return tf.no_op() if not tf.executing_eagerly() else None
        for old in [u for u in self._expected if u <= uid]:
            self._expected.pop(old, None)
            self._staged.pop(old, None)
        return self._apply(staged)

    def _apply(self, staged):
        """Checks every value's shape, then restores them all through the variables' own
        savers; raises before any is assigned when one does not fit."""
        if tf.executing_eagerly():
            wrong = [self._describe(name, tensors[0]) for name, (_, tensors, _) in staged.items()
                     if tensors[0].shape != self.variables[name].shape]
            if wrong:
                raise refusal(self._owner_name, wrong, self.variables)
            for saveable, tensors, shapes in staged.values():
                saveable.restore(tensors, shapes)
            return None
        checks = [self._shape_check(name, tensors[0])
                  for name, (_, tensors, _) in staged.items()]
        restores = []
        with tf.control_dependencies(checks):
            for name, (saveable, tensors, shapes) in staged.items():
                value = tf.reshape(tensors[0], self.variables[name].shape)
                restores.append(saveable.restore([value], shapes))
        return tf.group(*restores)

    def _accepted(self, name):
        variable = self.variables[name]
        return _accepted_text(variable.shape.as_list(), variable.dtype)

    def _describe(self, name, value):
        return _wrong_value_text(name, np.asarray(value), self._accepted(name))

    def _shape_check(self, name, value):
        """Graph mode: an op that fails the restore when ``value`` does not hold as many
        elements as the variable (the file's shape is not known while the graph is built); the
        value is then reshaped to the variable's shape, so one of the right size is assigned
        in that shape."""
        variable = self.variables[name]
        return tf.debugging.Assert(
            tf.equal(state_io.element_count(value), variable.shape.num_elements()),
            ["%s: the checkpoint being restored holds a value of shape" % self._owner_name,
             tf.shape(value), "for %s; accepted: %s. Nothing was restored into its state: "
             "restore a checkpoint this object wrote." % (name.lstrip("_"),
                                                          self._accepted(name))],
            name="check_restored_shape")


def _accepted_text(shape, dtype):
    return "shape %s (%s)" % (tuple(shape), tf.as_dtype(dtype).name)


def _wrong_value_text(name, value, accepted):
    shown = np.array2string(value, threshold=8, separator=" ")
    return "shape %s for %s (%s); accepted: %s" % (tuple(value.shape), name.lstrip("_"), shown,
                                                   accepted)


def refusal(owner_name, wrong, names):
    """The ``ValueError`` of a refused restore: ``wrong`` describes the values refused,
    ``names`` are the state variables none of which changed."""
    return ValueError(
        "%s: the checkpoint being restored holds %s. Nothing was restored into %s's state (%s): "
        "restore a checkpoint this object wrote."
        % (owner_name, "; ".join(wrong), owner_name,
           ", ".join(sorted(n.lstrip("_") for n in names))))


def refuse_pending(owner_name, holders, accepted):
    """Refuses, before an owner makes its state variables, a checkpoint whose values for them
    do not fit: while the restore runs (see :class:`StagedList`), and again when the owner
    builds its state.

    Keras 3 builds an optimizer inside the first traced step of ``model.fit``; a restore refused
    after the variables are made there would leave them half-made, so the values still pending
    are checked before. ``holders`` are ``(trackable, {local name: state variable name})``
    where the restore left its positions; ``accepted`` maps a state variable name to its
    ``(shape, dtype)``. For each name the newest pending value is checked (TensorFlow restores
    that one); when one has another shape, every pending position of that restore is dropped (so
    nothing of it is restored later either) and ``ValueError`` is raised as
    :class:`StagedState` raises it."""
    newest = _newest_pending(holders)
    wrong, refused = [], set()
    for name, position in sorted(newest.items()):
        key = _value_key(position)
        shape = position.checkpoint.shape_map.get(key) if key else None
        want, dtype = accepted[name]
        if shape is not None and tuple(shape) != tuple(want):
            value = tf.train.load_checkpoint(position.checkpoint.save_path_string).get_tensor(key)
            wrong.append(_wrong_value_text(name, np.asarray(value), _accepted_text(want, dtype)))
            refused.add(position.checkpoint.restore_uid)
    if not wrong:
        return
    for holder, names in holders:
        pending = holder._deferred_dependencies  # pylint: disable=protected-access
        for local in list(pending):
            kept = [p for p in pending[local] if p.checkpoint.restore_uid not in refused]
            if kept:
                pending[local] = kept
            else:
                del pending[local]
    raise refusal(owner_name, wrong, accepted)


def _newest_pending(holders):
    """``{state variable name: the position of the newest restore still pending for it}``
    (``holders`` as for :func:`refuse_pending`)."""
    newest = {}
    for holder, names in holders:
        holder._maybe_initialize_trackable()  # pylint: disable=protected-access
        for local, name in names.items():
            for position in holder._deferred_dependencies.get(local, ()):  # pylint: disable=protected-access
                uid = position.checkpoint.restore_uid
                if name not in newest or uid > newest[name].checkpoint.restore_uid:
                    newest[name] = position
    return newest


def pending_value(holders, name):
    """The value (a NumPy array) that the newest restore still pending for the state variable
    ``name`` will give it when the owner makes its state, or None when none is pending."""
    position = _newest_pending(holders).get(name)
    key = _value_key(position) if position is not None else None
    if key is None:
        return None
    return np.asarray(
        tf.train.load_checkpoint(position.checkpoint.save_path_string).get_tensor(key))


def _value_key(position):
    """The checkpoint key of the value a restore position holds for a variable, or None."""
    for attribute in position.object_proto.attributes:
        if attribute.name == tracking.VARIABLE_VALUE_KEY:
            return attribute.checkpoint_key
    return None


class _StagedVariable(tracking.Trackable):
    """A state variable's stand-in in checkpoints: saved with the variable's own saver, under
    the same key; restored through :meth:`StagedState.stage`."""

    def __init__(self, state, name):
        self._npu_state = state
        self._npu_name = name

    def _gather_saveables_for_checkpoint(self):
        return {tracking.VARIABLE_VALUE_KEY: self._saveable}

    def _saveable(self, name):
        variable = self._npu_state.variables[self._npu_name]
        # A distributed variable names its own saver; a plain one is its own saveable.
        own = variable._gather_saveables_for_checkpoint()[tracking.VARIABLE_VALUE_KEY]  # pylint: disable=protected-access
        if callable(own) and not isinstance(own, tf.Variable):
            own = own(name=name)
        else:
            own, = tracking.saveable_object_util.saveable_objects_for_op(variable, name)
        return _StagingSaveable(self, own)

    def _stage(self, saveable, tensors, shapes):
        uid = getattr(self, "_self_update_uid", None)
        return self._npu_state.stage(self._npu_name, uid, saveable, tensors, shapes)


class _StagingSaveable(tracking.saveable_object.SaveableObject):
    """The variable's own saveable, whose restore hands the value to the stand-in."""

    def __init__(self, child, own):
        super().__init__(own.op, own.specs, own.name)
        self._child = child
        self._own = own

    def restore(self, restored_tensors, restored_shapes):
        return self._child._stage(self._own, restored_tensors, restored_shapes)  # pylint: disable=protected-access


class StagedChildren:
    """Mixin for a ``Trackable`` (before its base): the :class:`StagedState` that
    :meth:`_staged_state` returns (None: none yet) gives the checkpoint children of the state
    variables, in place of the variables (a SavedModel keeps the variables)."""

    def _staged_state(self):
        return None

    def _staged_children(self, save_type="checkpoint"):
        state = self._staged_state()
        if state is None:
            return {}
        return state.children if save_type == "checkpoint" else state.variables

    def _expect_child(self, name):
        state = self._staged_state()
        if state is None or name not in state.children:
            return None
        state.expect(name, getattr(self, "_self_update_uid", None))
        return state.children[name]

    if tracking.CHILDREN_API:
        def _trackable_children(self, save_type="checkpoint", **kwargs):
            children = dict(super()._trackable_children(save_type, **kwargs))
            children.update(self._staged_children(save_type))
            return children

        def _lookup_dependency(self, name, cached_dependencies=None):
            child = self._expect_child(name)
            if child is not None:
                return child
            return super()._lookup_dependency(name, cached_dependencies)
    else:
        # TF 2.6 lists the same children for checkpoints and SavedModels; a SavedModel asks for
        # its extra children first, then for these, which then are the variables themselves.
        def _list_extra_dependencies_for_serialization(self, serialization_cache):
            self.__dict__["_npu_saved_model_listing"] = True
            return super()._list_extra_dependencies_for_serialization(serialization_cache)

        @property
        def _checkpoint_dependencies(self):
            saved_model = self.__dict__.pop("_npu_saved_model_listing", False)
            staged = self._staged_children("savedmodel" if saved_model else "checkpoint")
            kept = [ref for ref in super()._checkpoint_dependencies if ref.name not in staged]
            return kept + [tracking.TrackableReference(name, child)
                           for name, child in staged.items()]

        def _lookup_dependency(self, name):
            child = self._expect_child(name)
            if child is not None:
                return child
            return super()._lookup_dependency(name)


class StagedList(tracking.Trackable):
    """A tracked list's stand-in in checkpoints, for an owner that tracks some of a
    :class:`StagedState`'s variables twice: by name, and again as entries of a list (Keras 3's
    optimizer does, in its list of variables). The entries keep their indices; a state variable
    is replaced by the same child the owner lists under the variable's name, so the two
    references still lead to one object: one checkpoint key, restored once, through the staging.

    ``entries`` returns the live list, ``state`` the :class:`StagedState` (None: none yet).
    ``before_lookup`` (optional) is called each time a restore looks an entry up: TensorFlow
    restores breadth first, so by then it has visited the owner itself and left there what it
    holds for variables the owner has not made yet (see :func:`refuse_pending`).
    TensorFlow 2.9 and later only (the ``_trackable_children`` API; Keras 3 needs TF 2.16).
    """

    def __init__(self, entries, state, before_lookup=None):
        self._npu_entries = entries
        self._npu_state = state
        self._npu_before_lookup = before_lookup

    def _npu_child(self, entry, announce=False):
        state = self._npu_state()
        name = state.name_of(entry) if state is not None else None
        if name is None:
            return entry
        if announce:
            state.expect(name, getattr(self, "_self_update_uid", None))
        return state.children[name]

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        entries = self._npu_entries()
        if save_type != "checkpoint":
            return {str(i): entry for i, entry in enumerate(entries)}
        return {str(i): self._npu_child(entry) for i, entry in enumerate(entries)}

    def _lookup_dependency(self, name, cached_dependencies=None):
        if self._npu_before_lookup is not None:
            self._npu_before_lookup()
        entries = self._npu_entries()
        if not name.isdigit() or int(name) >= len(entries):
            return None          # an entry not made yet: TensorFlow defers it
        return self._npu_child(entries[int(name)], announce=True)

    def restore_deferred_entries(self):
        """Restores what a checkpoint read before the entries existed holds for them (after
        :meth:`StagedState.restore_deferred` for the state variables' entries)."""
        self._maybe_initialize_trackable()
        for index, entry in enumerate(self._npu_entries()):
            self._handle_deferred_dependencies(str(index), self._npu_child(entry))

    def state_indices(self):
        """``{index: state variable name}`` of the entries that are state variables."""
        state = self._npu_state()
        found = ((str(i), state.name_of(entry)) for i, entry in enumerate(self._npu_entries()))
        return {i: name for i, name in found if name is not None}


__all__ = ["StagedState", "StagedChildren", "StagedList", "refusal", "refuse_pending"]
