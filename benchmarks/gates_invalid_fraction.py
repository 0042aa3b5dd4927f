"""Measures the fraction of invalid gates courses against gate width and course scale.

Usage: ``python benchmarks/gates_invalid_fraction.py [--courses 10000] [--out docs/_static]``

For each course scale and gate width, builds the epoch-0 gates courses of seeds
``0 .. courses - 1`` (other parameters at their defaults: roughness 0.3, 5 harmonics, gates every
5 units at most) and counts the invalid ones, by defect. Prints a table and writes
``gates_invalid_fraction.png`` and ``gates_invalid_fraction.txt`` into ``--out``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import warp as wp

from torchrl_ext.envs.course import CourseDefect, CourseGenerator, CourseParams

SCALES = (5.0, 10.0, 20.0)
WIDTHS = tuple(float(w) for w in range(1, 21))


def measure(courses: int) -> dict[tuple[float, float], tuple[float, float]]:
    """``(scale, gate_width)`` to (invalid fraction, fraction with crossing bars)."""
    table = {}
    for scale in SCALES:
        gen = CourseGenerator(courses, seed=0, params=CourseParams(scale=scale), mode="gates")
        for width in WIDTHS:
            gen.set_params(gate_width=width)
            gen.regenerate(advance=False)
            defects = gen.views["defects"]
            invalid = float((defects != 0).double().mean())
            crossing = float(((defects & CourseDefect.CROSSING_GATES) != 0).double().mean())
            table[scale, width] = (invalid, crossing)
    return table


def write(table: dict, courses: int, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = [f"invalid fraction of {courses} gates courses (seeds 0-{courses - 1}, epoch 0)"]
    lines.append("gate_width " + " ".join(f"scale={s:<6g}" for s in SCALES))
    for width in WIDTHS:
        row = " ".join(f"{table[s, width][0]:<12.4f}" for s in SCALES)
        lines.append(f"{width:<10g} {row}")
    text = "\n".join(lines)
    print(text)
    (out / "gates_invalid_fraction.txt").write_text(text + "\n")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    for scale in SCALES:
        ax.plot(WIDTHS, [table[scale, w][0] for w in WIDTHS], marker="o", ms=3, label=f"{scale:g}")
    ax.set_xlabel("gate_width")
    ax.set_ylabel("invalid fraction")
    ax.set_xticks(range(0, 21, 2))
    ax.grid(alpha=0.3)
    ax.legend(title="scale", fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "gates_invalid_fraction.png", dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--courses", type=int, default=10_000, help="courses per point")
    parser.add_argument("--out", type=Path, default=Path("docs/_static"), help="output folder")
    args = parser.parse_args()
    wp.config.log_level = wp.LOG_WARNING
    table = measure(args.courses)
    for (scale, width), (invalid, crossing) in table.items():
        if invalid != crossing:
            print(f"scale={scale} gate_width={width}: other defects ({invalid - crossing:.4f})")
    write(table, args.courses, args.out)


if __name__ == "__main__":
    main()
