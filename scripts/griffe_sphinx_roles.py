"""A griffe extension for the documentation site: the package's docstrings in Markdown.

The docstrings are written with Sphinx's cross-reference roles (``:func:`x```, ``:class:`~a.B```)
and reST's ``Example::`` literal-block marker. mkdocstrings renders Markdown, where those would
show as stray colons; this extension rewrites each docstring, when griffe reads it, into the
Markdown equivalent: a role becomes its target in code type (``~`` keeps the last name, as Sphinx
does), and a paragraph ending in ``::`` ends in ``:`` (the indented block after it is already a
Markdown code block). The source files are not changed.
"""
import re

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):`(~?)([^`]+)`")
_LITERAL_MARKER = re.compile(r"(\S)::$", re.M)


def _role(match):
    target = match.group(2)
    if match.group(1):
        target = target.rsplit(".", 1)[-1]
    return "`%s`" % target


def markdown_docstring(text):
    """``text`` with Sphinx roles and reST literal markers in Markdown."""
    return _LITERAL_MARKER.sub(r"\1:", _ROLE.sub(_role, text))


class SphinxRolesToMarkdown(griffe.Extension):
    """Rewrites every docstring griffe loads (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):  # pylint: disable=unused-argument
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
