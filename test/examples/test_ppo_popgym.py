"""The POPGym pipeline: its encoder and action heads, its config and a quick run per action kind.

Its checkpoint/resume is checked with the other pipelines' in ``test_pipelines.py``.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torchrl.data import Bounded, Categorical, MultiCategorical, Unbounded

from torchrl_ext.envs import popgym
from torchrl_ext.examples import __main__ as entry
from torchrl_ext.examples import _popgym_paper, _run_folder, ppo_popgym
from torchrl_ext.examples._popgym import ObservationEncoder
from torchrl_ext.examples.ppo_popgym import Config, IndependentCategorical, policy_head


class TestObservationEncoder:
    def test_categorical_by_hand(self):
        encoder = ObservationEncoder(Categorical(3, shape=(5,)))
        out = encoder(torch.tensor([[2, 0], [1, 1]]))
        assert encoder.features == 3
        assert out.tolist() == [
            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
            [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]],
        ]

    def test_multi_categorical_matches_one_hot_per_component(self):
        nvec = [3, 2, 4]
        encoder = ObservationEncoder(MultiCategorical(torch.tensor(nvec).expand(6, 3)))
        obs = torch.stack([torch.randint(n, (6, 7)) for n in nvec], -1).to(torch.uint8)
        expected = torch.cat(
            [torch.nn.functional.one_hot(obs[..., i].long(), n) for i, n in enumerate(nvec)], -1
        )
        assert torch.equal(encoder(obs), expected.float())

    def test_floats_pass_through(self):
        encoder = ObservationEncoder(Unbounded((4, 2)))
        obs = torch.randn(4, 2)
        assert encoder.features == 2 and torch.equal(encoder(obs), obs)


class TestHeads:
    def test_independent_categorical_is_the_sum_of_its_components(self):
        logits = torch.randn(5, 2 * 3)
        dist = IndependentCategorical(logits, components=2)
        action = torch.stack([torch.randint(3, (5,)), torch.randint(3, (5,))], -1)
        parts = [
            torch.distributions.Categorical(logits=logits[:, 3 * i : 3 * (i + 1)]).log_prob(
                action[:, i]
            )
            for i in range(2)
        ]
        assert torch.allclose(dist.log_prob(action), parts[0] + parts[1])
        assert torch.equal(dist.mode, logits.view(5, 2, 3).argmax(-1))

    def test_independent_categorical_samples_each_component_by_its_probabilities(self):
        logits = torch.log(torch.tensor([[0.7, 0.2, 0.1, 0.1, 0.1, 0.8]]))
        draws = IndependentCategorical(logits.expand(20_000, 6), components=2).sample()
        first = torch.bincount(draws[:, 0], minlength=3) / 20_000
        second = torch.bincount(draws[:, 1], minlength=3) / 20_000
        # 20,000 draws: the standard error of each frequency is at most 0.0036
        assert torch.allclose(first, torch.tensor([0.7, 0.2, 0.1]), atol=0.02)
        assert torch.allclose(second, torch.tensor([0.1, 0.1, 0.8]), atol=0.02)

    @pytest.mark.parametrize(
        "spec, outputs, in_keys",
        [
            (Categorical(4, shape=(3,)), 4, ["logits"]),
            (MultiCategorical(torch.tensor([8, 8]).expand(3, 2)), 16, ["logits"]),
            (Bounded(-2.0, 2.0, shape=(3, 1)), 2, ["loc", "scale"]),
        ],
    )
    def test_policy_head(self, spec, outputs, in_keys):
        n, dist = policy_head(Config(), spec)
        assert n == outputs and dist["in_keys"] == in_keys

    def test_unsupported_action_spec(self):
        with pytest.raises(TypeError, match="no policy head for an action spec of type Unbounded"):
            policy_head(Config(), Unbounded((3, 2)))


class TestConfig:
    def test_env_names_are_the_ports(self):
        assert len(_popgym_paper.ENVS) == len(popgym.__all__)
        assert set(f"{name}Env" for name in _popgym_paper.ENVS) == set(popgym.__all__)

    def test_refusals(self):
        with pytest.raises(ValueError, match=r"env must be one of .* got env='Pong'"):
            Config(env="Pong")
        with pytest.raises(ValueError, match=r"difficulty must be .* got difficulty='extreme'"):
            Config(difficulty="extreme")

    def test_default_target_is_the_papers_figure(self):
        assert (
            Config(env="HigherLower").target
            == _popgym_paper.PAPER_PPO_GRU["HigherLower", "easy"][0]
        )
        assert (
            Config(env="CountRecall").target == _popgym_paper.PAPER_PPO_LSTM["CountRecall", "easy"]
        )
        assert Config(env="Battleship").target == 1.0  # no figure: the best return
        assert Config(target=0.5).target == 0.5

    def test_tuned_config_is_used_by_the_command(self, tmp_path):
        result = _quick(tmp_path, "RepeatFirst")
        assert isinstance(result.config, ppo_popgym.RepeatFirstConfig)
        assert result.config.forget_bias == 3.0
        lstm = ppo_popgym.make_agent(result.config)[1][1].lstm
        assert torch.equal(lstm.bias_ih_l0[64:128], torch.full((64,), 3.0))

    def test_bandit_trains_the_papers_budget_in_whole_batches(self):
        cfg = ppo_popgym.config_class("MultiarmedBandit")()
        assert isinstance(cfg, ppo_popgym.MultiarmedBanditConfig)
        assert cfg.frames <= _popgym_paper.PAPER_FRAMES < cfg.frames + cfg.frames_per_batch * 256
        assert cfg.frames % cfg.frames_per_batch == 0
        same = dataclasses.asdict(Config(env="MultiarmedBandit", frames=cfg.frames))
        assert dataclasses.asdict(cfg) == same  # nothing else differs

    def test_bandit_budget_is_what_help_states(self, capsys):
        with pytest.raises(SystemExit):
            entry.main(["popgym", "--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        frames = ppo_popgym.MultiarmedBanditConfig().frames
        assert f"{frames:,} for MultiarmedBandit's PPO" in help_text


def _quick(tmp_path, env: str, *more: str):
    threads = torch.get_num_threads()
    try:
        argv = ["popgym", "--env", env, "--quick", "--out", str(tmp_path), "--no-progress"]
        (result,) = entry.main([*argv, *more])
    finally:
        torch.set_num_threads(threads)
    return result


class TestQuick:
    """A quick run per observation and action kind: categorical, multi-discrete, continuous."""

    @pytest.mark.parametrize(
        "env",
        ["RepeatPrevious", "Concentration", "Battleship", "PositionOnlyPendulum"],
    )
    def test_runs_and_logs(self, tmp_path, env):
        result = _quick(tmp_path, env)
        cfg = result.config
        assert cfg.env == env and result.frames == 3 * cfg.frames_per_batch
        scalars = _run_folder.read_scalars(tmp_path / "seed0")
        best = [v for _, v in scalars["best_mean_return"] if not math.isnan(v)]
        means = [v for _, v in scalars["mean_return"] if not math.isnan(v)]
        assert best == [max(means[: i + 1]) for i in range(len(means))]
        # POPGym scales rewards so that the best return is 1; the worst is about -1 (Battleship's
        # all-miss episode, which runs past the needed misses, is -64/51)
        assert all(-64 / 51 - 1e-5 <= v <= 1.0 + 1e-5 for v in [*means, result.final_eval])

    def test_difficulty_reaches_the_env(self, tmp_path):
        result = _quick(tmp_path, "RepeatFirst", "--difficulty", "medium")
        assert result.config.difficulty == "medium"
        env = ppo_popgym.make_env(result.config, 2, 0, [], torch.device("cpu"))
        assert env.base_env.difficulty == "medium"

    def test_run_folder_names_env_and_difficulty(self):
        args = entry.make_parser().parse_args(["popgym", "--env", "HigherLower"])
        assert entry.pipeline(args) == "popgym/HigherLower-easy"

    def test_unknown_env_is_one_line(self, capsys):
        with pytest.raises(SystemExit):
            entry.main(["popgym", "--env", "Pong"])
        assert "argument --env: invalid choice: 'Pong'" in capsys.readouterr().err


class TestR2D2:
    """``--algo r2d2``: the Q-network reads one-hot observations and scores each action."""

    def test_quick_run(self, tmp_path):
        result = _quick(tmp_path, "HigherLower", "--algo", "r2d2")
        assert result.config.env == "HigherLower"
        assert (tmp_path / "seed0").is_dir()
        best = [v for _, v in _run_folder.read_scalars(tmp_path / "seed0")["best_mean_return"]]
        assert math.isfinite(result.best_return) and result.best_return == best[-1]

    def test_q_values_per_action(self):
        from torchrl_ext.examples import r2d2_popgym

        cfg = r2d2_popgym.Config(env="CountRecall")
        env = r2d2_popgym.make_env(cfg, 3, 0, "cpu")
        td = r2d2_popgym.make_qnet(cfg)(env.reset())
        assert td["action_value"].shape == (3, env.action_spec.n) == (3, 27)

    def test_multi_discrete_env_is_refused_in_one_line(self, capsys):
        with pytest.raises(SystemExit):
            entry.main(["popgym", "--algo", "r2d2", "--env", "Battleship", "--no-progress"])
        err = capsys.readouterr().err
        assert "--env Battleship: its action is not a single discrete choice" in err
        assert len(err.strip().splitlines()[-1]) < 200 and "Traceback" not in err

    def test_config_refuses_multi_discrete_env(self):
        from torchrl_ext.examples import r2d2_popgym

        with pytest.raises(ValueError, match="got env='MineSweeper'"):
            r2d2_popgym.Config(env="MineSweeper")

    def test_run_folder_names_the_algorithm(self):
        args = entry.make_parser().parse_args(["popgym", "--algo", "r2d2"])
        assert entry.pipeline(args) == "popgym/RepeatPrevious-easy-r2d2"


class TestResultsTable:
    """``popgym-results --quick``: trains what its folder lacks, then reads finished runs back."""

    def test_trains_then_reads_back(self, tmp_path):
        from torchrl_ext.examples import popgym_results

        argv = ["popgym-results", "--quick", "--seeds", "0", "1", "--out", str(tmp_path)]
        text = entry.main([*argv, "--no-progress"])
        folders = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.glob("*/seed*"))
        assert folders == [
            "MultiarmedBandit-easy/seed0",
            "MultiarmedBandit-easy/seed1",
            "RepeatPrevious-easy/seed0",
            "RepeatPrevious-easy/seed1",
        ]
        rows = [line for line in text.splitlines() if line.startswith("| RepeatPrevious")]
        assert len(rows) == 1 and "| 1.000 ± 0.000 |" in rows[0]
        folder = tmp_path / "RepeatPrevious-easy" / "seed1"
        run = popgym_results.Run.read(folder)
        logged = [v for _, v in _run_folder.read_scalars(folder)["best_mean_return"]]
        assert run.seed == 1 and run.mmer == logged[-1] and run.frames == 768
        assert (tmp_path / "popgym_results.md").read_text() == text
        # a second call trains nothing: the finished runs are read back
        before = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.csv")}
        assert entry.main([*argv, "--no-progress"]) == text
        assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.csv")} == before

    def test_unfinished_run_is_resumed(self, tmp_path, monkeypatch):
        from torchrl_ext.examples import popgym_results

        argv = ["popgym-results", "--quick", "--seeds", "0", "--envs", "RepeatPrevious"]
        argv += ["--out", str(tmp_path), "--no-progress", "--save-every", "256"]
        log_row = _run_folder.log_row

        def die_at_512(logger, row, step):
            log_row(logger, row, step)
            if step == 512:
                raise KeyboardInterrupt

        monkeypatch.setattr(_run_folder, "log_row", die_at_512)
        with pytest.raises(SystemExit):
            entry.main(argv)
        monkeypatch.setattr(_run_folder, "log_row", log_row)
        folder = tmp_path / "RepeatPrevious-easy" / "seed0"
        assert not popgym_results.is_finished(folder)
        entry.main(argv)
        assert popgym_results.is_finished(folder)
        assert popgym_results.Run.read(folder).frames == 768
