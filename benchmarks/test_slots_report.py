"""Smoke test of ``slots_report.py``'s reading of run logs and its pairing of runs.

The runs themselves (distributed R2D2 on a local Ray, minutes each) are what the report is for;
this checks that a run folder's logs are read into the report's figures, on a hand-made log.
"""

from __future__ import annotations

from slots_report import order, pair_ratios, report, summary


def write_log(folder, name, rows):
    (folder / "scalars").mkdir(parents=True, exist_ok=True)
    text = "".join(f"{step},{value}\n" for step, value in rows)
    (folder / "scalars" / f"{name}.csv").write_text(text)


def test_summary_of_a_hand_made_log(tmp_path):
    write_log(tmp_path, "seconds", [(1000, 2.0), (2000, 4.0), (3000, 5.0)])
    write_log(tmp_path, "updates", [(1000, 10), (2000, 20), (3000, 30)])
    write_log(tmp_path, "mean_return", [(1000, float("nan")), (2000, 400.0), (3000, 380.0)])
    got = summary(tmp_path)
    assert got == {
        "frames_per_s": 600.0,
        "updates_per_s": 6.0,
        "frames_to_target": 2000,
        "seconds_to_target": 4.0,
    }
    write_log(tmp_path, "mean_return", [(1000, 10.0), (3000, 399.9)])
    assert summary(tmp_path)["seconds_to_target"] is None


def test_pairs_and_report():
    rows = []
    for rnd in range(2):
        for seed in range(3):
            assert set(order(seed, rnd)) == {"on", "off"}
            for mode in order(seed, rnd):
                rate = 3000.0 * (1.2 if mode == "on" else 1.0) + seed
                row = {"mode": mode, "seed": seed, "round": rnd, "seconds_to_target": None}
                rows.append({**row, "frames_per_s": rate, "updates_per_s": rate / 64})
    ratios = pair_ratios(rows, "frames_per_s")
    assert len(ratios) == 6 and all(1.19 < r < 1.21 for r in ratios)
    text = report(rows)
    assert "on/off frames_per_s: median 1.200" in text and "over 6 pairs" in text
    assert "seconds_to_target" not in text  # no run reached the target
