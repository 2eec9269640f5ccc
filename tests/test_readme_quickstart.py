"""The README's quick start and the getting-started page show the same script and command.

The quick start's first block is an Ascend script (``train.py``), the console block after it
the command that runs it on a CPU with that command's output, the second block a pytest test of
it (tests/test_pytest_plugin.py runs it). That every block runs and prints what it shows is
tests/test_docs_pages.py's; here, that the two pages do not drift apart.
"""
import docs_pages


def quick_start():
    """The README's quick start section: its Python blocks and its console blocks."""
    return (docs_pages.block_sources("README.md", "python", "## Quick start"),
            docs_pages.block_sources("README.md", "console", "## Quick start"))


def test_getting_started_shows_the_readme_script_and_command():
    blocks, consoles = quick_start()
    assert blocks[0].startswith("# train.py") and len(consoles) == 1
    assert docs_pages.block_sources("docs/getting-started.md", "python") == blocks[:1]
    assert docs_pages.block_sources("docs/getting-started.md", "console") == consoles
