"""``examples/ppo_popgym.py``: its inputs and action heads, its settings per env, a quick run
per observation and action kind, bitwise resume and the policy it saves."""

from __future__ import annotations

import dataclasses
import json
import math

import pipelines
import ppo_popgym
import pytest
import runs
import torch
from tensordict.nn import TensorDictSequential
from torchrl.data import Bounded, Categorical, MultiCategorical, Unbounded
from torchrl.envs.utils import ExplorationType, set_exploration_type

from torchrl_ext.envs import popgym
from torchrl_ext.modules import FFMModule

#: One env per observation and action kind: a card and a choice, a board of cells (observed as
#: many categoricals), a board cell to shoot (two components), a torque.
QUICK_ENVS = ["RepeatPrevious", "Concentration", "Battleship", "PositionOnlyPendulum"]


#: Quick runs of the memories and network options, each with its ``--out`` name.
MEMORY_RUNS = {
    "gru": ["--memory", "gru"],
    "ffm": ["--memory", "ffm"],
    "none": ["--memory", "none"],
    "shared": ["--memory", "ffm", "--shared-memory", "--input-layer", "16", "--head-layers", "2"],
    "episodes": ["--env", "MineSweeper", "--memory", "gru", "--steps", "0"],
}


@pytest.fixture(scope="module")
def memory_runs(tmp_path_factory):
    """Each of ``MEMORY_RUNS``' quick run: its folder and result."""
    done = {}
    for name, argv in MEMORY_RUNS.items():
        out = tmp_path_factory.mktemp(name)
        (result,) = pipelines.run("ppo_popgym", "--quick", *argv, "--out", str(out))
        done[name] = (out / "seed0", result)
    return done


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory):
    """Each of ``QUICK_ENVS``' quick run: its folder and result."""
    done = {}
    for env in QUICK_ENVS:
        out = tmp_path_factory.mktemp(env)
        (result,) = pipelines.run("ppo_popgym", "--quick", "--env", env, "--out", str(out))
        done[env] = (out / "seed0", result)
    return done


class TestObservationEncoder:
    def test_categorical_by_hand(self):
        encoder = ppo_popgym.ObservationEncoder(Categorical(3, shape=(5,)))
        out = encoder(torch.tensor([[2, 0], [1, 1]]))
        assert encoder.features == 3
        assert out.tolist() == [
            [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]],
            [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]],
        ]

    def test_multi_categorical_matches_one_hot_per_component(self):
        nvec = [3, 2, 4]
        encoder = ppo_popgym.ObservationEncoder(MultiCategorical(torch.tensor(nvec).expand(6, 3)))
        obs = torch.stack([torch.randint(n, (6, 7)) for n in nvec], -1).to(torch.uint8)
        expected = torch.cat(
            [torch.nn.functional.one_hot(obs[..., i].long(), n) for i, n in enumerate(nvec)], -1
        )
        assert torch.equal(encoder(obs), expected.float())

    def test_floats_pass_through(self):
        encoder = ppo_popgym.ObservationEncoder(Unbounded((4, 2)))
        obs = torch.randn(4, 2)
        assert encoder.features == 2 and torch.equal(encoder(obs), obs)

    def test_previous_action_follows_the_observation(self):
        inputs = ppo_popgym.AgentInputs(Categorical(3), previous=2)
        out = inputs(torch.tensor([1, 2]), torch.tensor([[1.0, 0.0], [0.0, 1.0]]))
        assert out.tolist() == [[0.0, 1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 1.0, 0.0, 1.0]]


class TestHeads:
    def test_independent_categorical_is_the_sum_of_its_components(self):
        logits = torch.randn(5, 2 * 3)
        dist = ppo_popgym.IndependentCategorical(logits, components=2)
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
        draws = ppo_popgym.IndependentCategorical(logits.expand(20_000, 6), components=2).sample()
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
        n, dist = ppo_popgym.policy_head(spec)
        assert n == outputs and dist["in_keys"] == in_keys

    def test_unsupported_action_spec(self):
        with pytest.raises(TypeError, match="no policy head for an action spec of type Unbounded"):
            ppo_popgym.policy_head(Unbounded((3, 2)))


class TestArgs:
    """``env`` and ``difficulty`` are checked; ``frames`` 0, ``forget_bias``, ``gamma`` and
    ``target`` nan take the env's values (``TUNED``, the paper's figure); a value given wins."""

    def test_env_names_are_the_ports(self):
        ports = {name for name in popgym.__all__ if name.endswith("Env")}  # the classes
        assert len(ppo_popgym.ENVS) == len(ports)
        assert {f"{name}Env" for name in ppo_popgym.ENVS} == ports

    def test_refusals(self):
        with pytest.raises(ValueError, match=r"env must be one of .* got env='Pong'"):
            ppo_popgym.Args(env="Pong")
        with pytest.raises(ValueError, match=r"difficulty must be .* got difficulty='extreme'"):
            ppo_popgym.Args(difficulty="extreme")

    def test_default_target_is_the_papers_figure(self):
        assert (
            ppo_popgym.Args(env="HigherLower").target
            == ppo_popgym.PAPER_PPO_GRU["HigherLower", "easy"][0]
        )
        lstm = ppo_popgym.PAPER_PPO_LSTM["CountRecall", "easy"]
        assert ppo_popgym.Args(env="CountRecall").target == lstm
        assert ppo_popgym.Args(env="Battleship").target == 1.0  # no figure: the best return
        assert ppo_popgym.Args(target=0.5).target == 0.5

    def test_tuned_forget_bias_reaches_the_lstms(self, tmp_path):
        ((args, _),) = runs.parse(ppo_popgym.Args, ["--env", "RepeatFirst", "--out", str(tmp_path)])
        assert args.forget_bias == 3.0
        actor, critic = ppo_popgym.make_agent(args)
        for lstm in ppo_popgym.memories(actor, critic):
            assert torch.equal(lstm.lstm.bias_ih_l0[64:128], torch.full((64,), 3.0))
            assert torch.equal(lstm.lstm.bias_hh_l0[64:128], torch.zeros(64))

    def test_count_recall_is_undiscounted_and_the_others_are_not(self, tmp_path):
        assert ppo_popgym.Args(env="CountRecall").gamma == 0.0
        assert ppo_popgym.Args(env="CountRecall", difficulty="hard").gamma == 0.0
        assert ppo_popgym.Args(env="RepeatPrevious").gamma == 0.99
        ((args, _),) = runs.parse(ppo_popgym.Args, ["--env", "CountRecall", "--out", str(tmp_path)])
        loss = ppo_popgym.make_loss(args, *ppo_popgym.make_agent(args))
        assert float(loss.value_estimator.gamma) == 0.0

    def test_tuned_per_difficulty(self, tmp_path):
        """An ``(env, difficulty)`` entry of ``TUNED`` applies at that difficulty only."""
        medium = ppo_popgym.Args(env="CountRecall", difficulty="medium")
        assert (medium.memory, medium.gamma) == ("ffm", 0.0)  # the env's gamma, the pair's memory
        assert ppo_popgym.Args(env="CountRecall", difficulty="hard").memory == "lstm"
        repeat = ppo_popgym.Args(env="RepeatPrevious", difficulty="medium")
        assert (repeat.gamma, repeat.frames, repeat.memory) == (0.0, 6_291_456, "ffm")
        easy = ppo_popgym.Args(env="RepeatPrevious")
        assert (easy.gamma, easy.frames, easy.memory) == (0.99, 2_097_152, "lstm")
        noisy = ppo_popgym.Args(env="NoisyPositionOnlyCartPole")
        assert (noisy.frames, noisy.memory, noisy.epochs) == (6_291_456, "lstm", 4)
        noisy = ppo_popgym.Args(env="NoisyPositionOnlyCartPole", difficulty="medium")
        assert (noisy.frames, noisy.memory) == (6_291_456, "lstm")
        cart = ppo_popgym.Args(env="PositionOnlyCartPole", difficulty="medium")
        assert cart.frames == ppo_popgym.UNTUNED["frames"]
        argv = ["--env", "CountRecall", "--difficulty", "medium", "--out", str(tmp_path)]
        ((args, _),) = runs.parse(ppo_popgym.Args, argv)
        assert args.memory == "ffm"
        actor, critic = ppo_popgym.make_agent(args)
        assert all(isinstance(m, FFMModule) for m in ppo_popgym.memories(actor, critic))

    def test_sizes_rows_and_epochs_left_unset_are_the_env_s(self):
        easy = ppo_popgym.Args(env="CountRecall")
        assert (easy.memory, easy.head, easy.head_layers, easy.epochs) == ("ffm", 128, 2, 8)
        medium = ppo_popgym.Args(env="CountRecall", difficulty="medium")
        assert (medium.head, medium.head_layers, medium.epochs) == (64, 1, 4)
        other = ppo_popgym.Args(env="RepeatFirst")
        assert (other.head, other.head_layers, other.epochs) == (64, 1, 4)
        given = ppo_popgym.Args(env="CountRecall", head=32, head_layers=1, epochs=3)
        assert (given.head, given.head_layers, given.epochs) == (32, 1, 3)
        ae = ppo_popgym.Args(env="Autoencode")
        assert (ae.memory, ae.hidden, ae.steps, ae.row_steps) == ("gru", 256, 0, 103)
        assert (ae.gamma, ae.head, ae.head_layers, ae.epochs) == (0.0, 128, 2, 8)
        medium = ppo_popgym.Args(env="Autoencode", difficulty="medium")
        assert (medium.memory, medium.hidden, medium.steps, medium.row_steps) == (
            "gru",
            256,
            0,
            207,
        )
        assert (medium.gamma, medium.head, medium.epochs, medium.frames) == (0.0, 128, 8, 4_194_304)
        other = ppo_popgym.Args(env="HigherLower", difficulty="medium")
        assert (other.memory, other.hidden, other.steps, other.head) == ("lstm", 64, 64, 64)
        first = ppo_popgym.Args(env="RepeatFirst", difficulty="medium")
        assert (first.memory, first.steps, first.row_steps, first.epochs) == ("lstm", 0, 415, 8)
        assert (first.forget_bias, first.gamma, first.frames) == (5.0, 0.99, 14_680_064)
        assert ppo_popgym.Args(env="RepeatFirst").forget_bias == 3.0  # Easy keeps its bias
        assert ppo_popgym.Args(env="RepeatFirst").row_steps == 64
        given = ppo_popgym.Args(env="Autoencode", memory="lstm", hidden=32, steps=16)
        assert (given.memory, given.hidden, given.steps, given.row_steps) == ("lstm", 32, 16, 16)
        assert ppo_popgym.Args(env="Autoencode", difficulty="medium", steps=0).row_steps == 207
        with pytest.raises(ValueError, match="epochs must be an integer >= 1, got epochs=-1"):
            ppo_popgym.Args(epochs=-1)
        with pytest.raises(ValueError, match="hidden must be an integer >= 1, got hidden=-1"):
            ppo_popgym.Args(hidden=-1)
        with pytest.raises(ValueError, match=r"steps must be an integer >= 0 \(-1: the env's\)"):
            ppo_popgym.Args(steps=-2)
        with pytest.raises(ValueError, match=r"got steps=-1\.0"):
            ppo_popgym.Args(steps=-1.0)

    def test_a_memory_given_wins_over_the_tuned_one(self):
        args = ppo_popgym.Args(env="CountRecall", difficulty="medium", memory="lstm")
        assert args.memory == "lstm"
        assert ppo_popgym.Args(env="RepeatPrevious", memory="gru").memory == "gru"

    def test_a_value_given_wins_over_the_tuned_one(self, tmp_path):
        argv = ["--env", "RepeatFirst", "--forget-bias", "0", "--out", str(tmp_path)]
        ((args, _),) = runs.parse(ppo_popgym.Args, argv)
        assert args.forget_bias == 0.0
        argv = ["--env", "CountRecall", "--gamma", "0.9", "--out", str(tmp_path / "gamma")]
        ((args, _),) = runs.parse(ppo_popgym.Args, argv)
        assert args.gamma == 0.9
        argv = ["--env", "MultiarmedBandit", "--quick", "--out", str(tmp_path)]
        ((args, _),) = runs.parse(ppo_popgym.Args, argv, ppo_popgym.QUICK)
        assert args.frames == ppo_popgym.QUICK["frames"] == 3 * 8 * 32

    def test_bandit_trains_the_papers_budget_in_whole_batches(self):
        args = ppo_popgym.Args(env="MultiarmedBandit")
        batch = args.num_envs * args.steps
        assert args.frames == ppo_popgym.TUNED["MultiarmedBandit"]["frames"]
        assert args.frames <= ppo_popgym.PAPER_FRAMES < args.frames + batch * 256
        assert args.frames % batch == 0
        same = dataclasses.asdict(ppo_popgym.Args(env="MultiarmedBandit", frames=args.frames))
        assert dataclasses.asdict(args) == same  # nothing else differs
        for difficulty, memory in (("easy", {"memory"}), ("medium", set())):
            bandit = dataclasses.asdict(
                ppo_popgym.Args(env="MultiarmedBandit", difficulty=difficulty)
            )
            other = dataclasses.asdict(ppo_popgym.Args(env="HigherLower", difficulty=difficulty))
            differ = {k for k, v in bandit.items() if other[k] != v}
            assert differ == {"env", "frames", "target", *memory}
        assert args.memory == "ffm"

    def test_help_states_the_tuned_values(self, capsys):
        with pytest.raises(SystemExit):
            runs.parse(ppo_popgym.Args, ["--help"])
        help_text = " ".join(capsys.readouterr().out.split())
        bandit = ppo_popgym.TUNED["MultiarmedBandit"]
        repeat_first = ppo_popgym.TUNED["RepeatFirst", "medium"]
        assert bandit["frames"] == repeat_first["frames"]
        assert (
            f"{bandit['frames']:,} (the paper's) for MultiarmedBandit and for RepeatFirst at Medium"
            in help_text
        )
        assert f"{ppo_popgym.UNTUNED['frames']:,}" in help_text
        biases = (ppo_popgym.TUNED["RepeatFirst"]["forget_bias"], repeat_first["forget_bias"])
        assert "{:g} for RepeatFirst ({:g} at Medium)".format(*biases) in help_text
        easy = ppo_popgym.TUNED["CountRecall", "easy"]
        autoencode = ppo_popgym.TUNED["Autoencode"]
        for key in ("epochs", "head"):
            assert autoencode[key] == easy[key]
        assert f"{easy['head']} for Autoencode and for CountRecall at Easy" in help_text
        assert repeat_first["epochs"] == easy["epochs"]
        epochs = f"{easy['epochs']} for Autoencode, for CountRecall at Easy and for RepeatFirst at"
        assert epochs in help_text
        assert f"{autoencode['hidden']} for Autoencode, else 64" in help_text
        assert autoencode["steps"] == repeat_first["steps"]
        assert f"{autoencode['steps']} for Autoencode and for RepeatFirst at Medium" in help_text
        assert f"{autoencode['frames']:,} for Autoencode, else" in help_text
        noisy = ppo_popgym.TUNED["NoisyPositionOnlyCartPole"]["frames"]
        assert f"{noisy:,} for NoisyPositionOnlyCartPole and for RepeatPrevious at" in help_text
        assert ppo_popgym.TUNED["RepeatPrevious", "medium"]["memory"] == "ffm"
        memory = "ffm for CountRecall and MultiarmedBandit at Easy and for CountRecall and "
        assert memory + "RepeatPrevious at Medium, gru for Autoencode, else lstm" in help_text

    def test_difficulty_reaches_the_env(self):
        args = ppo_popgym.Args(env="RepeatFirst", difficulty="medium")
        env = ppo_popgym.make_env(args, 2, 0, [], "cpu")
        assert env.base_env.difficulty == "medium"

    def test_run_folder_names_the_file_env_and_difficulty(self, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        ((_, run),) = runs.parse(ppo_popgym.Args, ["--env", "HigherLower", "--seeds", "2"])
        assert run.out.as_posix() == "runs/ppo_popgym/HigherLower-easy/seed2"


class TestNetworkOptions:
    """``memory``, ``shared_memory``, ``input_layer``, ``head_layers`` and ``steps`` 0 build the
    networks and rows they document; ``PAPER`` is the documented command line."""

    def test_each_memory_stores_its_state_under_its_keys(self):
        shapes = {"lstm": (1, 64), "gru": (1, 64), "ffm": (32, 4, 2)}
        for memory, shape in shapes.items():
            args = ppo_popgym.Args(memory=memory)
            found = ppo_popgym.memories(*ppo_popgym.make_agent(args))
            assert [type(m).__name__ for m in found] == [f"{memory.upper()}Module"] * 2
            keys = {
                *ppo_popgym.state_keys(memory, "actor"),
                *ppo_popgym.state_keys(memory, "critic"),
            }
            env = ppo_popgym.make_env(args, 2, 0, found, "cpu")
            td = env.reset()
            assert {k for k in td.keys() if k.startswith("rs_")} == keys
            assert all(td[k].shape == (2, *shape) for k in keys)

    def test_none_has_no_memory(self):
        actor, critic = ppo_popgym.make_agent(ppo_popgym.Args(memory="none"))
        assert ppo_popgym.memories(actor, critic) == []
        assert ppo_popgym.collection_policy(actor, critic) is actor

    @pytest.mark.parametrize("input_layer", [0, 16])
    def test_collection_skips_the_critics_inputs_and_acts_the_same(self, input_layer):
        args = ppo_popgym.Args(env="CountRecall", input_layer=input_layer)
        actor, critic = ppo_popgym.make_agent(args)
        policy = ppo_popgym.collection_policy(actor, critic)
        assert list(policy.module[1:]) == list(critic.module)[1:-1]  # no inputs, no head
        full = TensorDictSequential(actor, *list(critic.module)[:-1])
        env = ppo_popgym.make_env(args, 3, 0, ppo_popgym.memories(actor, critic), "cpu")
        td = env.rand_step(env.reset())["next"]
        td["is_init"][0] = True
        outputs = []
        for net in (policy, full):
            torch.manual_seed(1)
            outputs.append(net(td.clone()))
        assert (outputs[0] == outputs[1]).all()

    def test_forget_bias_reaches_the_lstm_only(self):
        args = ppo_popgym.Args(env="RepeatFirst", memory="gru")
        assert args.forget_bias == 3.0  # filled, and ignored by the GRU
        gru = ppo_popgym.memories(*ppo_popgym.make_agent(args))[0].gru
        bound = 1 / math.sqrt(gru.hidden_size)  # PyTorch's initialisation, untouched
        assert gru.bias_ih_l0.abs().max() <= bound < 3.0

    def test_shared_memory_is_one_trunk(self):
        args = ppo_popgym.Args(memory="lstm", shared_memory=True, input_layer=16, head_layers=2)
        actor, critic = ppo_popgym.make_agent(args)
        (memory,) = ppo_popgym.memories(actor, critic)
        assert memory.in_keys[1:3] == ["rs_shared_h", "rs_shared_c"]
        assert any(m is memory for m in critic.modules())
        assert ppo_popgym.collection_policy(actor, critic) is actor
        loss = ppo_popgym.make_loss(args, actor, critic)
        (group,) = ppo_popgym.make_optimizer(args, loss).param_groups
        every = {id(p) for p in [*actor.parameters(), *critic.parameters()]}
        assert len(group["params"]) == len({id(p) for p in group["params"]}) == len(every)

    def test_input_layer_and_head_layers(self):
        args = ppo_popgym.Args(memory="ffm", input_layer=16, head_layers=2, head=8, hidden=12)
        _, critic = ppo_popgym.make_agent(args)
        critic_net = [m.module for m in critic.module if hasattr(m, "module")]
        layer = critic_net[1]
        assert isinstance(layer[0], torch.nn.Linear) and layer[0].out_features == 16
        assert isinstance(layer[1], torch.nn.LeakyReLU)
        (memory,) = [m for m in critic.module if isinstance(m, ppo_popgym.FFMModule)]
        assert (memory.input_size, memory.hidden_size) == (16, 12)
        head = critic.module[-1].module
        widths = [(m.in_features, m.out_features) for m in head if isinstance(m, torch.nn.Linear)]
        assert widths == [(12, 8), (8, 8), (8, 1)]

    def test_default_network_is_unchanged_by_the_options(self):
        """The defaults (one head layer, no input layer, own memories) draw the same weights."""
        default = runs.seeded(0, ppo_popgym.make_agent, ppo_popgym.Args())
        spelled = ppo_popgym.Args(memory="lstm", input_layer=0, head_layers=1, shared_memory=False)
        again = runs.seeded(0, ppo_popgym.make_agent, spelled)
        for a, b in zip(default, again, strict=True):
            sa, sb = a.state_dict(), b.state_dict()
            assert sa.keys() == sb.keys()
            assert all(torch.equal(sa[k], sb[k]) for k in sa)

    def test_steps_zero_is_the_episode_length(self):
        args = ppo_popgym.Args(env="Autoencode", steps=0)
        assert args.steps == 0 and args.row_steps == 103
        env = ppo_popgym.make_base_env(args, 1, 0, "cpu")
        assert args.row_steps == env.max_steps
        assert ppo_popgym.Args(steps=48).row_steps == 48

    def test_runs_that_named_the_memory_policy_still_load(self):
        assert ppo_popgym.Args(policy="mlp").memory == "none"
        assert ppo_popgym.Args(policy="lstm").memory == "lstm"
        assert "policy" not in dataclasses.asdict(ppo_popgym.Args())
        with pytest.raises(ValueError, match="policy must be 'lstm' or 'mlp', got policy='gru'"):
            ppo_popgym.Args(policy="gru")

    def test_refusals(self):
        with pytest.raises(
            ValueError, match=r"memory must be one of tuned, lstm, gru, ffm, none, got memory='rnn'"
        ):
            ppo_popgym.Args(memory="rnn")
        with pytest.raises(
            ValueError, match="shared_memory must be True or False, got shared_memory=1"
        ):
            ppo_popgym.Args(shared_memory=1)
        with pytest.raises(
            ValueError, match=r"input_layer must be an integer >= 0, got input_layer=2\.5"
        ):
            ppo_popgym.Args(input_layer=2.5)
        with pytest.raises(
            ValueError, match="head_layers must be an integer >= 1, got head_layers=-1"
        ):
            ppo_popgym.Args(head_layers=-1)
        with pytest.raises(ValueError, match="head must be an integer >= 1, got head=-2"):
            ppo_popgym.Args(head=-2)

    def test_paper_is_the_documented_command_line(self, tmp_path):
        doc = ppo_popgym.__doc__
        command = doc[doc.index("python examples/ppo_popgym.py --memory gru") :]
        command = command[: command.index("\n\n")].replace("\\\n", " ").split()[2:]
        ((args, _),) = runs.parse(ppo_popgym.Args, [*command, "--out", str(tmp_path)])
        assert args.memory == "gru"
        assert {k: getattr(args, k) for k in ppo_popgym.PAPER} == ppo_popgym.PAPER
        assert args.envs_per_minibatch * args.steps == 8192


class TestMemoryRuns:
    """Quick runs of each memory and option: the batches check their stored states, the critic
    replayed from them gives GAE's values, and the first PPO ratio is 1 (``check_batch``)."""

    @pytest.mark.parametrize("name", list(MEMORY_RUNS))
    def test_runs_and_logs(self, memory_runs, name):
        folder, result = memory_runs[name]
        config = json.loads((folder / "config.json").read_text())["config"]
        argv = MEMORY_RUNS[name]
        assert config["memory"] == argv[argv.index("--memory") + 1]
        assert math.isfinite(result.final_eval)

    def test_steps_zero_rows_are_episode_lengths(self, memory_runs):
        folder, result = memory_runs["episodes"]
        batch = 8 * ppo_popgym.episode_steps("MineSweeper", "easy")  # 8 envs x 14 steps
        steps = [step for step, _ in runs.read_scalars(folder)["mean_return"]]
        assert steps == [batch * (i + 1) for i in range(len(steps))]
        assert steps[-1] == result.frames >= ppo_popgym.QUICK["frames"] > steps[-2]

    def test_loaded_ffm_policy_acts_as_trained(self, memory_runs):
        folder, result = memory_runs["ffm"]
        policy, args, module = runs.load_policy(folder)
        assert module is ppo_popgym and args.memory == "ffm"
        primers = ppo_popgym.memories(*ppo_popgym.make_agent(args))
        assert ppo_popgym.evaluate(args, policy, primers, "cpu") == result.final_eval
        env = ppo_popgym.acting_env(args, 2, 7, "cpu")
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            rollout = env.rollout(5, policy)
        assert rollout["next", "rs_actor_ffm"].shape == (2, 5, 32, 4, 2)


def test_ffm_resumes_bitwise(tmp_path, monkeypatch):
    pipelines.assert_resumes_bitwise(
        tmp_path, monkeypatch, "ppo_popgym", 256, 512, "--memory", "ffm"
    )


class TestQuick:
    """A quick run per observation and action kind: checked batches, POPGym's return range."""

    @pytest.mark.parametrize("env", QUICK_ENVS)
    def test_runs_and_logs(self, quick_runs, env):
        folder, result = quick_runs[env]
        config = json.loads((folder / "config.json").read_text())
        assert config["pipeline"] == "ppo_popgym" and config["config"]["env"] == env
        assert config["config"]["frames"] == result.frames == ppo_popgym.QUICK["frames"]
        scalars = runs.read_scalars(folder)
        assert [step for step, _ in scalars["mean_return"]] == [256, 512, 768]
        assert scalars["final_eval"] == [(768, result.final_eval)]
        best = [v for _, v in scalars["best_mean_return"] if not math.isnan(v)]
        means = [v for _, v in scalars["mean_return"] if not math.isnan(v)]
        assert best == [max(means[: i + 1]) for i in range(len(means))]
        # POPGym scales rewards so that the best return is 1; the worst is about -1 (Battleship's
        # all-miss episode, which runs past the needed misses, is -64/51)
        assert all(-64 / 51 - 1e-5 <= v <= 1.0 + 1e-5 for v in [*means, result.final_eval])
        assert str(result).startswith(f"ppo_popgym {env} easy seed 0: ")

    @pytest.mark.parametrize("env", QUICK_ENVS)
    def test_loaded_policy_acts_as_trained(self, quick_runs, env):
        """The policy ``runs.load_policy`` reads back scores the run's final evaluation."""
        folder, result = quick_runs[env]
        policy, args, module = runs.load_policy(folder)
        assert module is ppo_popgym and args.env == env
        primers = ppo_popgym.memories(*ppo_popgym.make_agent(args))
        assert ppo_popgym.evaluate(args, policy, primers, "cpu") == result.final_eval
        env_ = ppo_popgym.acting_env(args, 2, 7, "cpu")
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            rollout = env_.rollout(5, policy)
        assert rollout.batch_size == (2, 5)
        assert rollout["action"].shape[2:] == env_.action_spec.shape[1:]


def _as_text(folder):
    """A run's scalars but the wall time, each value as text (so that NaN equals NaN)."""
    return {k: [(s, repr(v)) for s, v in rows] for k, rows in pipelines.scalars(folder).items()}


@pytest.mark.parametrize("env", ["RepeatPrevious", "Battleship"])
def test_resumes_bitwise(tmp_path, monkeypatch, env):
    """``pipelines.assert_resumes_bitwise`` with NaN equal to NaN: the mean return is NaN
    until a first episode ends, after the first batch of a quick run."""
    whole = tmp_path / "whole"
    pipelines.run("ppo_popgym", "--quick", "--env", env, "--out", str(whole), "--save-every", "256")
    folder = pipelines.interrupted(
        monkeypatch, "ppo_popgym", tmp_path / "cut", 256, 512, "--env", env
    )
    pipelines.run("ppo_popgym", "--resume", str(folder))
    assert _as_text(folder) == _as_text(whole / "seed0")


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--env", "Pong"], "argument --env: invalid choice: 'Pong'"),
        (["--difficulty", "extreme"], "argument --difficulty: invalid choice"),
        (["--frames", "100"], "frames must be at least one batch (num_envs * steps = 4096)"),
        (["--frames", "-1"], "frames must be an integer >= 1"),
        (["--forget-bias", "inf"], "forget_bias must be a finite number"),
        (["--target", "inf"], "target must be a finite number"),
        (["--lr", "0"], "lr must be a finite number > 0"),
        (["--gamma", "inf"], "gamma must be a finite number in"),
        (["--reward-scale", "0"], "reward_scale"),
        (["--envs-per-minibatch", "65"], "envs_per_minibatch must be <= num_envs"),
        (["--policy", "mlp"], "unrecognized arguments: --policy mlp"),
        (["--memory", "rnn"], "argument --memory: invalid choice: 'rnn'"),
        (["--steps", "-2"], "steps must be an integer >= 0 (-1: the env's), got steps=-2"),
        (["--input-layer", "-8"], "input_layer must be an integer >= 0, got input_layer=-8"),
        (["--head-layers", "-1"], "head_layers must be an integer >= 1, got head_layers=-1"),
        (
            ["--env", "MineSweeper", "--steps", "0", "--frames", "100"],
            "frames must be at least one batch (num_envs * the episode length, steps=0 = 896)",
        ),
    ],
)
def test_refuses_bad_arguments_in_one_line(tmp_path, capsys, argv, match):
    pipelines.assert_refused("ppo_popgym", argv, match, tmp_path, capsys)
