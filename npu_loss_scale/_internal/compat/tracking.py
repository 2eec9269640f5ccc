"""Checkpoint children that exist only once built (per graph), on both Trackable APIs.

TensorFlow 2.9 and later ask a ``Trackable`` for its children through
``_trackable_children()``. TF 2.6.5 asks through the ``_checkpoint_dependencies`` property (a
list of references) when saving and ``_lookup_dependency(name)`` when restoring, and never calls
``_trackable_children``: a child added only there is silently left out of its checkpoints.
:class:`ExtraChildren` serves both.
"""


def _trackable_base():
    try:
        from tensorflow.python.trackable import base  # pylint: disable=import-outside-toplevel
    except ImportError:
        from tensorflow.python.training.tracking import (  # pylint: disable=import-outside-toplevel
            base)
    return base


_base = _trackable_base()
CHILDREN_API = hasattr(_base.Trackable, "_trackable_children")


class ExtraChildren:
    """Mixin for a ``Trackable``: the dict that :meth:`_extra_trackable_children` returns (local
    name -> trackable) is saved and restored with the object's own children; a name in both
    takes the extra child. (TF 2.6 asks for the children from inside the base class's
    constructor too: the method must answer before the subclass has set anything up.)"""

    def _extra_trackable_children(self):
        return {}

    if CHILDREN_API:
        def _trackable_children(self, save_type="checkpoint", **kwargs):
            children = dict(super()._trackable_children(save_type, **kwargs))
            children.update(self._extra_trackable_children())
            return children
    else:
        @property
        def _checkpoint_dependencies(self):
            extra = self._extra_trackable_children()
            kept = [ref for ref in super()._checkpoint_dependencies if ref.name not in extra]
            return kept + [_base.TrackableReference(name, child)
                           for name, child in extra.items()]

        def _lookup_dependency(self, name):
            extra = self._extra_trackable_children()
            if name in extra:
                return extra[name]
            return super()._lookup_dependency(name)


def _saveable_modules():
    # The same paths on every supported release (1.15 to 2.21).
    from tensorflow.python.training.saving import (  # pylint: disable=import-outside-toplevel
        saveable_object)
    from tensorflow.python.training.saving import (  # pylint: disable=import-outside-toplevel
        saveable_object_util)
    return saveable_object, saveable_object_util


#: ``SaveableObject`` (what a checkpoint saves and restores for one tensor) and the module that
#: builds a variable's own.
saveable_object, saveable_object_util = _saveable_modules()
Trackable = _base.Trackable
TrackableReference = _base.TrackableReference
VARIABLE_VALUE_KEY = _base.VARIABLE_VALUE_KEY
