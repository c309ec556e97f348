"""mkdocs hooks of the documentation site (``hooks:`` in mkdocs.yml): MathJax served by the site.

The pages' formulas are typeset by MathJax 3. When the ``django-static-mathjax`` wheel is
installed (it ships MathJax 3.2.2 as package data, no Django needed) the parts the site uses are
added to the build, so the site typesets with no network; otherwise the script entry points to
the same MathJax on a CDN, and the build still needs no network.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

LOCAL = "javascripts/mathjax/tex-chtml.js"
CDN = "https://cdn.jsdelivr.net/npm/mathjax@3.2.2/es5/tex-chtml.js"
# tex-chtml.js loads its fonts and any TeX extension a formula needs from beside itself
PARTS = ("tex-chtml.js", "output/chtml/fonts/woff-v2", "input/tex/extensions", "ui")


def mathjax_root() -> Path | None:
    """The ``es5`` folder of the installed MathJax wheel, or None."""
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        root = Path(location) / "static" / "mathjax" / "es5"
        if (root / "tex-chtml.js").is_file():
            return root
    return None


def on_config(config: Any) -> Any:
    if mathjax_root() is None:
        for i, script in enumerate(config.extra_javascript):
            if str(script) == LOCAL:
                config.extra_javascript[i] = CDN
    return config


def on_files(files: Files, config: Any) -> Files:
    root = mathjax_root()
    if root is None:
        return files
    target = Path(LOCAL).parent
    for part in PARTS:
        path = root / part
        for source in sorted(path.rglob("*")) if path.is_dir() else [path]:
            if source.is_file():
                uri = (target / source.relative_to(root)).as_posix()
                files.append(File.generated(config, uri, abs_src_path=str(source)))
    return files
