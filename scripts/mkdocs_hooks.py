"""mkdocs hooks of the documentation site (mkdocs.yml names this file; scripts/build_docs.sh runs it).

Two jobs:

* ``CHANGELOG.md`` and ``CONTRIBUTING.md`` live at the top of the source tree, where people and
  package indexes look for them; the site shows each as a page (``changelog.md``,
  ``contributing.md``) generated from the file, so the text is written once. Their relative
  links are rewritten for the page's place: ``docs/x.md`` becomes ``x.md``; a link to another
  file of the source tree (a script, a test) becomes its path in code type, since the site
  holds no such page.
* A nav entry listed in ``extra.optional_pages`` whose page does not exist is left out with an
  INFO line (those pages are written alongside the site; see mkdocs.yml). Any other missing page
  still fails the strict build.
"""
import logging
import os
import re

from mkdocs.structure.files import File

LOG = logging.getLogger("mkdocs.hooks.npu_loss_scale")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT_PAGES = {"CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "contributing.md"}
_LINK = re.compile(r"\[([^\]]+)\]\((?!https?:|mailto:|#)([^)\s]+)\)")
_REFERENCE = re.compile(r"^(\[[^\]]+\]:\s*)(?!https?:|mailto:|#)(\S+)", re.M)


def _site_target(target):
    """The page a source-tree-relative link points to on the site, or None if it has none."""
    path, _, anchor = target.partition("#")
    if path.startswith("docs/") and path.endswith(".md"):
        return path[len("docs/"):] + ("#" + anchor if anchor else "")
    if path in ROOT_PAGES:
        return ROOT_PAGES[path] + ("#" + anchor if anchor else "")
    return None


def rewrite_links(markdown):
    """``markdown`` of a top-level file with its relative links made valid on a docs page."""
    def inline(match):
        text, target = match.group(1), match.group(2)
        on_site = _site_target(target)
        if on_site:
            return "[%s](%s)" % (text, on_site)
        return "`%s`" % target if text.strip("`") == target else "%s (`%s`)" % (text, target)

    def reference(match):
        return match.group(1) + (_site_target(match.group(2)) or match.group(2))

    return _REFERENCE.sub(reference, _LINK.sub(inline, markdown))


def on_files(files, config):
    """Add the pages generated from the top-level CHANGELOG.md and CONTRIBUTING.md."""
    for source, page in ROOT_PAGES.items():
        path = os.path.join(ROOT, source)
        if os.path.exists(path) and files.get_file_from_path(page) is None:
            with open(path, encoding="utf-8") as handle:
                content = rewrite_links(handle.read())
            files.append(File.generated(config, page, content=content))
    return files


def on_config(config):
    """Leave out the nav entries of optional pages that this checkout does not have."""
    optional = set(config.extra.get("optional_pages", ()))
    docs_dir = config.docs_dir

    def present(page):
        if page not in optional:
            return True
        if os.path.exists(os.path.join(docs_dir, page)):
            return True
        if any(generated == page and os.path.exists(os.path.join(ROOT, source))
               for source, generated in ROOT_PAGES.items()):
            return True
        LOG.info("nav: %s is not in this checkout; its entry is left out", page)
        return False

    def keep(items):
        kept = []
        for item in items:
            if isinstance(item, dict):
                (title, value), = item.items()
                if isinstance(value, list):
                    value = keep(value)
                    if value:
                        kept.append({title: value})
                elif present(value):
                    kept.append(item)
            elif isinstance(item, list):
                kept.append(keep(item))
            elif present(item):
                kept.append(item)
        return kept

    config.nav = keep(config.nav or [])
    return config
