"""Packaging for torchrl_ext: sequence replay, Warp envs and recurrent GAE for TorchRL."""

from setuptools import find_packages, setup

TEST = [
    "pytest>=8",
    "pytest-benchmark>=4",
    "scipy>=1.10",
    "hypothesis>=6",
    "gymnasium>=1.0",
    "ruff==0.17.6",
]
DOCS = [
    "sphinx>=8",
    "furo",
    "sphinx-gallery>=0.17",
    "myst-parser>=3",
    "matplotlib>=3.7",
]
EXAMPLES = ["matplotlib>=3.7", "tqdm>=4.60"]

setup(
    name="torchrl_ext",
    version="0.1.0",
    description="Sequence replay, Warp-backed batched envs and recurrent GAE for TorchRL.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["torchrl_ext", "torchrl_ext.*"]),
    python_requires=">=3.10",
    install_requires=[
        "torch==2.14.1",
        "torchrl==0.14.1",
        "tensordict==0.14.3",
        "warp-lang==1.19.0",
        "numpy",
        "numba>=0.60",
    ],
    extras_require={
        "test": TEST,
        "docs": DOCS,
        "hydra": ["hydra-core>=1.3"],
        "examples": EXAMPLES,
        "all": sorted(set(TEST + DOCS + EXAMPLES + ["hydra-core>=1.3"])),
    },
)
