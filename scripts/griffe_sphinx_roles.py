"""A griffe extension for the documentation site: the package's docstrings in Markdown.

The docstrings are written with Sphinx's cross-reference roles (``:func:`x```, ``:class:`~a.B```)
and reST's ``Example::`` literal-block marker. mkdocstrings renders Markdown, where those would
show as stray colons; this extension rewrites each docstring, when griffe reads it, into the
Markdown equivalent. A role becomes its target in code type (``~`` keeps the last name, as Sphinx
does); when the target is in the package, the code is also a link to its entry in the API
reference, if it has one (an optional cross-reference: a target the reference does not show
stays plain code). A name of the package's lazy table (``npu_loss_scale.GradScaler``) is linked
to where it is defined. A paragraph ending in ``::`` ends in ``:`` (the indented block after it
is already a Markdown code block). The source files are not changed.
"""
import ast
import os
import re

import griffe

_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc):`(~?)([^`]+)`")
_LITERAL_MARKER = re.compile(r"(\S)::$", re.M)
PACKAGE = "npu_loss_scale"
_INIT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE,
                     "__init__.py")


def _lazy_table():
    """``{public name: "npu_loss_scale.module[.attr]"}`` from the package's ``_EXPORTS``, read
    from the source (nothing is imported)."""
    with open(_INIT, encoding="utf-8") as handle:
        tree = ast.parse(handle.read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_EXPORTS"
                                                for t in node.targets):
            table = ast.literal_eval(node.value)
            return {name: PACKAGE + module + ("." + attr if attr else "")
                    for name, (module, attr) in table.items()}
    return {}


_LAZY = _lazy_table()


def _identifier(target):
    """Where ``target`` is documented, or None when it is not a name of the package."""
    if not target.startswith(PACKAGE + "."):
        return None
    first, _, rest = target[len(PACKAGE) + 1:].partition(".")
    if first in _LAZY:
        return _LAZY[first] + ("." + rest if rest else "")
    return target


def _role(match):
    target = match.group(2).strip()
    shown = target.rsplit(".", 1)[-1] if match.group(1) else target
    identifier = _identifier(target)
    if identifier is None:
        return "`%s`" % shown
    return '<autoref identifier="%s" optional><code>%s</code></autoref>' % (identifier, shown)


def markdown_docstring(text):
    """``text`` with Sphinx roles and reST literal markers in Markdown."""
    return _LITERAL_MARKER.sub(r"\1:", _ROLE.sub(_role, text))


class SphinxRolesToMarkdown(griffe.Extension):
    """Rewrites every docstring griffe loads (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):  # pylint: disable=unused-argument
        if obj.docstring is not None:
            obj.docstring.value = markdown_docstring(obj.docstring.value)
