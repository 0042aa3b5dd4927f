"""The POPGym pipeline: its encoder and action heads, its config and a quick run per action kind.

Its checkpoint/resume is checked with the other pipelines' in ``test_pipelines.py``.
"""

from __future__ import annotations

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

    def test_default_target_is_the_best_return(self):
        assert Config(env="Battleship").target == 1.0
        assert Config(target=0.5).target == 0.5


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
