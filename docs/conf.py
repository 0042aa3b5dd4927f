"""Sphinx configuration for torchrl_ext (furo theme, autodoc, sphinx-gallery tutorials)."""

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "torchrl_ext"
author = "torchrl_ext developers"
copyright = "2026, torchrl_ext developers"

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
templates_path = ["_templates"]
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "description"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
nitpicky = False
exclude_patterns = ["_build", "sg_execution_times.rst"]
suppress_warnings = ["config.cache"]
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]

intersphinx_mapping = {}

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
