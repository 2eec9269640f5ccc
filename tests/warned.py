"""The package's warnings recorded by pytest's ``recwarn`` fixture, by category."""
import warnings

from npu_loss_scale import LossScaleStuckWarning


def stuck(recorded):
    """The messages of the :class:`LossScaleStuckWarning`s in ``recorded`` (a ``recwarn``), and
    forgets every recorded warning (so the next call sees only later ones).

    It also records every later warning, repeats included: code run since ``recwarn`` began
    (building a Keras optimizer does) may have put a ``"default"`` filter first, which shows an
    identical message once per place, and these tests count the warnings each step gives."""
    found = [str(w.message) for w in recorded if issubclass(w.category, LossScaleStuckWarning)]
    recorded.clear()
    warnings.simplefilter("always")
    return found
