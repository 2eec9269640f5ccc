"""Typing names newer than the oldest supported Python (3.7, TensorFlow 1.15's).

``typing.TypedDict`` arrived in Python 3.8; on 3.7 it comes from ``typing_extensions``
(installed with the package there).
"""
try:
    from typing import TypedDict
except ImportError:
    from typing_extensions import TypedDict  # pylint: disable=import-error

__all__ = ["TypedDict"]
