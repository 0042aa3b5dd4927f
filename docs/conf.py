"""Sphinx configuration for torchrl_ext (furo theme, autodoc, sphinx-gallery tutorials)."""

import importlib.metadata
import inspect
import os
import sys

from docutils import nodes
from sphinx.util import logging as _sphinx_logging
from sphinx.util.inspect import signature as _sphinx_signature
from sphinx.util.inspect import stringify_signature

sys.path.insert(0, os.path.abspath(".."))

project = "torchrl_ext"
author = "torchrl_ext developers"
copyright = "2026, torchrl_ext developers"
REPOSITORY = "https://github.com/torchrl-ext/torchrl_ext"
with open(os.path.join(os.path.dirname(__file__), "_static", "github.svg")) as _icon:
    _GITHUB_ICON = _icon.read()


def _version() -> str:
    """The package's version: ``torchrl_ext.__version__``, else the installed metadata."""
    try:
        from torchrl_ext import __version__

        return __version__
    except ImportError:
        pass
    try:
        return importlib.metadata.version("torchrl_ext")
    except importlib.metadata.PackageNotFoundError:
        return "0.1.0"


release = version = _version()

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "sphinx_gallery.gen_gallery",
    "matplotlib.sphinxext.plot_directive",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 2

html_theme = "furo"
html_title = "torchrl_ext"
html_static_path = ["_static"]
html_css_files = ["custom.css"]
templates_path = ["_templates"]
html_context = {"repository_url": REPOSITORY}
html_sidebars = {
    "**": [
        "sidebar/scroll-start.html",
        "sidebar/brand.html",
        "sidebar/project-links.html",
        "sidebar/search.html",
        "sidebar/navigation.html",
        "sidebar/scroll-end.html",
    ]
}
html_theme_options = {
    "footer_icons": [
        {
            "name": "GitHub",
            "url": REPOSITORY,
            "html": _GITHUB_ICON,
            "class": "",
        }
    ],
}
autosummary_generate = True
# Own members only: the inherited nn.Module / EnvBase / Storage API is linked through the
# "Bases:" line to its own documentation instead of being repeated on every page.
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_class_signature = "mixed"
# Docstrings carry the types (Google style); hints only fill in a documented parameter that
# has no type in its docstring, so no parameter is listed twice.
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
# Short type names in docstrings' ``Args:`` link to their projects' documentation.
napoleon_preprocess_types = True
napoleon_type_aliases = {
    "TensorDict": ":class:`~tensordict.TensorDict`",
    "TensorDictBase": ":class:`~tensordict.TensorDictBase`",
    "TensorDictModuleBase": ":class:`~tensordict.nn.TensorDictModuleBase`",
    "wp.array": ":class:`warp.array`",
    "callable": ":class:`~collections.abc.Callable`",
}
nitpicky = False
exclude_patterns = ["_build", "sg_execution_times.rst"]
suppress_warnings = ["config.cache"]
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]

# Intersphinx inventories ship with the docs (docs/_inventories, written by
# make_inventories.py) so that the build needs no network; links point at the projects' docs.
_INV = os.path.join(os.path.dirname(__file__), "_inventories")
intersphinx_mapping = {
    name: (url, os.path.join(_INV, f"{name}.inv"))
    for name, url in {
        "python": "https://docs.python.org/3/",
        "torch": "https://docs.pytorch.org/docs/stable/",
        "tensordict": "https://docs.pytorch.org/tensordict/stable/",
        "torchrl": "https://docs.pytorch.org/rl/stable/",
        "warp": "https://nvidia.github.io/warp/",
    }.items()
}

sphinx_gallery_conf = {
    "examples_dirs": ["../tutorials"],
    "gallery_dirs": ["auto_tutorials"],
    "filename_pattern": r"/",
    "download_all_examples": False,
    "remove_config_comments": True,
    "abort_on_example_error": True,
    "write_computation_times": False,
    "image_scrapers": ("matplotlib",),
}


def _init_signature(app, what, name, obj, options, signature, return_annotation):
    """Show ``__init__``'s parameters for classes whose metaclass defines ``__call__``.

    TorchRL's env and sampler metaclasses wrap construction in ``__call__(cls, *args, **kwargs)``,
    which autodoc would otherwise print as the class signature.
    """
    if what != "class" or not inspect.isclass(obj) or signature != "(*args, **kwargs)":
        return None
    sig = _sphinx_signature(obj.__init__, bound_method=True)
    return stringify_signature(sig, show_annotation=False, show_return_annotation=False), None


def _refuse_empty_code_blocks(app, doctree):
    """Warn (an error under ``-W``) on a code block with nothing in it.

    A tutorial cell that holds only a sphinx-gallery config comment (removed from the page by
    ``remove_config_comments``) renders as an empty block: put such comments inside a cell that
    has code, or leave them out when they state a default.
    """
    for block in doctree.findall(nodes.literal_block):
        if not block.astext().strip():
            _sphinx_logging.getLogger(__name__).warning(
                "empty code block (a cell with only a removed config comment?)", location=block
            )


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)
    app.connect("doctree-read", _refuse_empty_code_blocks)
