"""The GRPO learner without Ray: samples, LoRA-only updates, checkpoints and exports."""

from __future__ import annotations

import copy
import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch

from workload.local import constants
from workload.local.config import load_config
from workload.local.episodes import EpisodeRecord, PlaySettings, play
from workload.local.grpo_trainer import (
    GrpoLearner,
    Sample,
    Scored,
    checkpoints_to_prune,
    ema_update,
    in_group_order,
    micro_batches,
    mini_batches,
    rollout_seed,
    score_episodes,
    step_log,
    token_denominator,
    turn_samples,
    updates_per_step,
    worker_shares,
)
from workload.local.policy import Encoder
from workload.local.rollout import attach_lora
from workload.local.rundir import RunDir
from workload.maze.generator import generate_from_seed
from workload.maze.metrics import Episode

SETTINGS = PlaySettings(size=7, cell_px=8, max_turns=3, history=1, temperature=1.0, max_new_tokens=2)


def _learner(tiny_model_dir, root, overrides=()):
    from workload.model.tiny import load_tiny

    base = [
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "generator.n_samples_per_prompt=2",
    ]
    cfg = load_config("local", [*base, *overrides])
    model, processor = load_tiny(tiny_model_dir)
    model = attach_lora(model, cfg.trainer.policy.model.lora)
    return GrpoLearner(
        cfg=cfg,
        run=RunDir(root),
        model=model,
        encoder=Encoder(processor),
        workers=[],
        ray=None,
        heldout=None,
        accept=lambda s: True,
        log=lambda *a: None,
        on_eval=lambda *a: None,
    )


@pytest.fixture(scope="module")
def episodes(tiny_model_dir):
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    states = [generate_from_seed(1, 7)] * 2 + [generate_from_seed(2, 7)] * 2
    return play(model, Encoder(processor), states, SETTINGS, generator_seed=0)


def _samples(episodes, advantages=(1.0, -1.0, 1.0, -1.0)):
    contexts, completions, advs, owners = turn_samples(episodes, list(advantages), history=1, size=7)
    return contexts, completions, advs, [(0, 0, 1, 1)[o] for o in owners]


def test_completions_with_vision_tokens_are_not_trained_on(episodes, tiny_model_dir):
    import copy

    from workload.model.tiny import load_tiny

    encoder = Encoder(load_tiny(tiny_model_dir)[1])
    image_pad = encoder.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert image_pad in encoder.vision_token_ids
    played = copy.deepcopy(episodes)
    played[0].completions[0] = [image_pad, encoder.eos_id]
    _, completions, _, owners = turn_samples(
        played, [1.0, -1.0, 1.0, -1.0], history=1, size=7, skip_tokens=encoder.vision_token_ids
    )
    assert [image_pad, encoder.eos_id] not in completions
    assert owners.count(0) == played[0].turns - 1


def test_every_turn_becomes_a_sample_carrying_its_episode_advantage(episodes):
    contexts, completions, advs, _ = _samples(episodes)
    assert len(contexts) == sum(e.turns for e in episodes)
    assert advs[: episodes[0].turns] == [1.0] * episodes[0].turns
    assert completions[0] == episodes[0].completions[0]


@pytest.mark.slow  # trains: optimizer steps on the tiny model
def test_update_moves_lora_weights_only_and_toward_positive_advantages(tiny_model_dir, tmp_path, episodes):
    learner = _learner(tiny_model_dir, tmp_path, ["trainer.policy.optimizer_config.lr=0.01"])
    named = dict(learner.model.named_parameters())
    before = {k: v.detach().clone() for k, v in named.items()}
    contexts, completions, advs, group_of = _samples(episodes)
    batch = learner.encoder.training_batch(contexts, completions)
    from workload.local.policy import completion_logprobs

    with torch.no_grad():
        lp_before = (completion_logprobs(learner.model, batch) * batch["loss_mask"][:, 1:]).sum(1)
    metrics = learner.update(contexts, completions, advs, group_of)
    with torch.no_grad():
        lp_after = (completion_logprobs(learner.model, batch) * batch["loss_mask"][:, 1:]).sum(1)
    changed = {k for k, v in named.items() if not torch.equal(v, before[k])}
    assert changed and all("lora_" in k for k in changed)
    sign = torch.tensor(advs)
    assert ((lp_after - lp_before) * sign).mean() > 0
    assert {"policy/loss", "policy/grad_norm", "policy/clip_ratio"} <= set(metrics)


@pytest.mark.slow  # trains: optimizer steps on the tiny model
def test_kl_term_is_computed_against_the_adapter_free_model(tiny_model_dir, tmp_path, episodes):
    learner = _learner(tiny_model_dir, tmp_path, ["trainer.algorithm.use_kl_loss=true"])
    metrics = learner.update(*_samples(episodes))
    assert metrics["policy/kl"] == pytest.approx(0.0, abs=1e-6)  # the fresh adapter is a no-op
    metrics = learner.update(*_samples(episodes))
    assert metrics["policy/kl"] > 0.0


@pytest.mark.slow  # trains: optimizer steps on the tiny model
def test_mini_batches_split_the_step_into_several_updates(tiny_model_dir, tmp_path, episodes):
    learner = _learner(tiny_model_dir, tmp_path, ["trainer.policy_mini_batch_size=1"])
    learner.update(*_samples(episodes))
    state = next(iter(learner.policy.optimizer.state_dict()["state"].values()))
    assert int(state["step"]) == 2


@pytest.mark.slow  # trains: optimizer steps on the tiny model
def test_checkpoint_round_trip_restores_lora_and_optimizer_and_prunes(tiny_model_dir, tmp_path, episodes):
    assert constants.MAX_CKPTS_TO_KEEP == 2
    learner = _learner(tiny_model_dir, tmp_path)
    for step in (1, 2, 3):
        learner.update(*_samples(episodes))
        learner.policy.save_checkpoint(step)
    run = RunDir(tmp_path)
    assert run.latest_step() == 3
    assert sorted(p.name for p in run.ckpts.glob("global_step_*")) == ["global_step_2", "global_step_3"]
    saved = learner.policy.lora_state()
    other = _learner(tiny_model_dir, tmp_path)
    other.policy.load_checkpoint(3)
    for key, value in other.policy.lora_state().items():
        assert torch.equal(value, saved[key]), key
    assert other.policy.optimizer.state_dict()["state"].keys() == learner.policy.optimizer.state_dict()["state"].keys()
    assert not list(tmp_path.glob("ckpts/.global_step_*"))  # no temp folders left behind


@pytest.mark.slow  # trains: optimizer steps on the tiny model
def test_export_is_a_loadable_peft_adapter_with_the_config_beside(tiny_model_dir, tmp_path, episodes):
    from peft import PeftModel

    from workload.model.tiny import load_tiny

    learner = _learner(tiny_model_dir, tmp_path, ["trainer.policy.optimizer_config.lr=0.01"])
    learner.update(*_samples(episodes))
    learner.policy.export(4)
    policy = RunDir(tmp_path).export(4)
    assert {"adapter_config.json", "adapter_model.safetensors", "trainer_config.json"} <= {
        p.name for p in policy.iterdir()
    }
    assert json.loads((policy / "trainer_config.json").read_text())["generator"]["n_samples_per_prompt"] == 2
    base, processor = load_tiny(tiny_model_dir)
    served = PeftModel.from_pretrained(base, policy).eval()
    contexts, completions, *_ = _samples(episodes)
    batch = Encoder(processor).training_batch(contexts[:2], completions[:2])
    inputs = {k: v for k, v in batch.items() if k != "loss_mask"}
    learner.model.eval()
    with torch.no_grad(), learner.policy.served_weights():
        assert torch.allclose(served(**inputs).logits, learner.model(**inputs).logits, atol=1e-5)


def test_evaluated_and_exported_weights_are_the_running_average(tiny_model_dir, tmp_path, episodes):
    learner = _learner(
        tiny_model_dir, tmp_path, ["trainer.policy.optimizer_config.lr=0.01", "rehearsal.ema_decay=0.5"]
    )
    start = learner.policy.lora_state()
    learner.update(*_samples(episodes))
    learner.policy.fold_average()
    raw = learner.policy.lora_state()
    with learner.policy.served_weights():
        served = learner.policy.lora_state()
    for key in raw:
        assert torch.allclose(served[key], 0.5 * start[key] + 0.5 * raw[key]), key
    after = learner.policy.lora_state()
    assert all(torch.equal(after[k], raw[k]) for k in raw)  # training continues from the raw weights


def test_without_averaging_the_raw_weights_are_served(tiny_model_dir, tmp_path, episodes):
    learner = _learner(
        tiny_model_dir, tmp_path, ["trainer.policy.optimizer_config.lr=0.01", "rehearsal.ema_decay=0.0"]
    )
    learner.update(*_samples(episodes))
    learner.policy.fold_average()
    raw = learner.policy.lora_state()
    with learner.policy.served_weights():
        assert all(torch.equal(v, raw[k]) for k, v in learner.policy.lora_state().items())


def test_merged_duplicates_give_the_gradient_of_every_turn(tiny_model_dir, tmp_path, episodes):
    """Training on each distinct turn once, weighted by its count, moves the weights exactly as
    training on every turn (the single-update case: ratio 1, no clipping)."""
    from workload.local.grpo_trainer import merge_duplicates

    contexts, completions, advs, group_of = _samples(episodes)
    doubled = (contexts * 2, completions * 2, advs * 2, group_of * 2)
    assert len(merge_duplicates(*doubled)) == len(merge_duplicates(contexts, completions, advs, group_of))

    def grads(samples):
        torch.manual_seed(0)  # the same fresh adapter each time
        learner = _learner(tiny_model_dir, tmp_path)
        learner.policy.optimizer.step = lambda: None  # keep the weights: compare the gradients only
        learner.update(*samples)
        return {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}

    # Every turn twice over: the same token-mean gradient as every turn once.
    once, twice = grads((contexts, completions, advs, group_of)), grads(doubled)
    assert once
    for name, grad in once.items():
        assert torch.allclose(grad, twice[name], atol=1e-6), name


def test_uninformative_groups_count_in_the_denominator(tiny_model_dir, tmp_path, episodes):
    """A thin step (few informative tokens among many) takes a proportionally smaller step."""
    contexts, completions, advs, group_of = _samples(episodes)
    tokens = sum(len(c) for c in completions)

    def grad_norm(group_tokens):
        torch.manual_seed(0)
        learner = _learner(tiny_model_dir, tmp_path)
        return learner.update(contexts, completions, advs, group_of, group_tokens)["policy/grad_norm"]

    alone = grad_norm({0: tokens // 2, 1: tokens - tokens // 2})
    diluted = grad_norm({0: 2 * tokens, 1: 2 * tokens})
    assert diluted == pytest.approx(alone * tokens / (4 * tokens), rel=1e-4)


def test_learning_rate_warms_up_then_decays_to_its_floor():
    from workload.local.grpo_trainer import lr_factor

    f = lr_factor("cosine_with_min_lr", warmup_steps=4, total_steps=20, min_lr_ratio=0.1)
    assert [f(n) for n in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(12) == pytest.approx(0.55)
    assert f(20) == pytest.approx(0.1)
    assert lr_factor("constant_with_warmup", warmup_steps=2, total_steps=20, min_lr_ratio=0.1)(19) == 1.0
    with pytest.raises(ValueError, match="unknown scheduler"):
        lr_factor("linear", warmup_steps=0, total_steps=1, min_lr_ratio=0.0)


@pytest.fixture(scope="module")
def long_episodes(tiny_model_dir):
    """Real rollouts of an untrained model, greedy so that the rollouts of a maze repeat each other
    (as a trained policy's mostly do): 2 mazes x 4 rollouts, up to 8 turns; identical turns of
    one group with advantages of one sign are merged, with different advantages averaged."""
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    states = [generate_from_seed(1, 7)] * 4 + [generate_from_seed(2, 7)] * 4
    settings = PlaySettings(size=7, cell_px=8, max_turns=8, history=1, temperature=0.0, max_new_tokens=2)
    return play(model, Encoder(processor), states, settings, generator_seed=3)


def _unmerged_gradient(learner, contexts, completions, advs) -> dict:
    """The token-mean policy gradient of one update written out turn by turn, nothing merged:
    loss = -sum(A * logp over every generated token of every turn) / tokens (ratio 1 at one update)."""
    from workload.local.policy import completion_logprobs

    learner.model.zero_grad(set_to_none=True)
    batch = learner.encoder.training_batch(contexts, completions)
    mask = batch["loss_mask"][:, 1:].float()
    logprobs = completion_logprobs(learner.model, batch)
    adv = torch.tensor(advs)[:, None]
    loss = -(adv * logprobs * mask).sum() / mask.sum()
    loss.backward()
    return {n: p.grad.clone() for n, p in learner.model.named_parameters() if p.grad is not None}


def test_merged_turns_give_the_unmerged_gradient_on_a_real_step(tiny_model_dir, tmp_path, long_episodes, monkeypatch):
    """The fast path (identical turns of a group trained once, weighted by their count) against the
    plain update over every turn: the same gradient to float precision; dropping the counts is not."""
    from workload.local import grpo_trainer

    contexts, completions, advs, owners = turn_samples(
        long_episodes, [1.0, 0.5, -0.25, 2.0, -1.0, -0.5, 0.75, 1.5], history=1, size=7
    )
    group_of = [o // 4 for o in owners]
    merged = grpo_trainer.merge_duplicates(contexts, completions, advs, group_of)
    assert len(merged) < len(contexts)  # the step really has repeated turns to merge

    def learner():
        torch.manual_seed(0)  # the same fresh adapter each time
        monkeypatch.setattr(constants, "MAX_GRAD_NORM", 1e9)  # no clipping: the gradient itself is compared
        made = _learner(tiny_model_dir, tmp_path, ["generator.n_samples_per_prompt=4"])
        made.policy.optimizer.step = lambda: None  # keep the weights: compare the gradients only
        with torch.no_grad():  # a non-zero adapter, so the gradient reaches every LoRA matrix
            for name, param in made.model.named_parameters():
                if "lora_B" in name:
                    param.normal_(0.0, 0.05)
        return made

    def fast_path() -> dict:
        made = learner()
        made.update(contexts, completions, advs, group_of)
        return {n: p.grad.clone() for n, p in made.model.named_parameters() if p.grad is not None}

    reference = _unmerged_gradient(learner(), contexts, completions, advs)
    got = fast_path()
    assert got.keys() == reference.keys() and got
    scale = max(float(g.abs().max()) for g in reference.values())
    assert scale > 1e-3  # a gradient large enough for the tolerance to mean something
    # measured: 4.8e-7 against a largest entry of 0.47 (float32 sums in another order); 64 turns -> 4 samples
    assert max(float((got[n] - reference[n]).abs().max()) for n in got) < 1e-5 * scale

    def uncounted(*args):  # the same merge with every count dropped to 1
        return [dataclasses.replace(s, count=1) for s in merge_duplicates_before(*args)]

    merge_duplicates_before = grpo_trainer.merge_duplicates
    monkeypatch.setattr(grpo_trainer, "merge_duplicates", uncounted)
    wrong = fast_path()
    assert max(float((wrong[n] - reference[n]).abs().max()) for n in wrong) > 1e-2 * scale  # measured: 0.17


def _sample(group: int, tokens: int = 1, count: int = 1) -> Sample:
    return Sample(context=None, completion=[7] * tokens, advantage=1.0, count=count, group=group)


def test_optimizer_steps_per_grpo_step_are_mini_batches_times_epochs(monkeypatch):
    monkeypatch.setattr(constants, "UPDATE_EPOCHS_PER_BATCH", 3)
    trainer = SimpleNamespace(train_batch_size=8, policy_mini_batch_size=2)
    assert updates_per_step(trainer) == 12


def test_mini_batches_take_whole_groups_in_order_and_skip_empty_ones():
    samples = [_sample(0), _sample(3), _sample(1), _sample(3), _sample(2)]
    minis = mini_batches(samples, n_minis=3, groups_per_mini=2)
    assert [groups for groups, _ in minis] == [range(0, 2), range(2, 4)]  # groups 4-5 have no sample
    assert [[s.group for s in mine] for _, mine in minis] == [[0, 1], [3, 3, 2]]


def test_token_denominator_counts_every_group_of_the_mini_batch_or_else_its_samples():
    samples = [_sample(0, tokens=2, count=3), _sample(1, tokens=1)]
    assert token_denominator(samples, range(0, 2), {0: 5, 1: 7, 2: 100}) == 12.0  # group 2 is another batch's
    assert token_denominator(samples, range(0, 2), None) == 7.0  # 3 x 2 merged tokens + 1
    assert token_denominator([], range(0, 2), {2: 100}) == 1.0  # never zero


def test_micro_batches_chunk_in_order_with_a_short_last_one():
    samples = [_sample(g) for g in range(5)]
    assert [[s.group for s in chunk] for chunk in micro_batches(samples, 2)] == [[0, 1], [2, 3], [4]]


def test_each_actor_plays_every_nth_group_from_its_index():
    assert worker_shares(5, 2) == [[0, 2, 4], [1, 3]]
    assert worker_shares(1, 3) == [[0], [], []]


def test_rollout_seeds_are_pinned_per_run_step_and_actor():
    # A resumed run replays the rollouts of the run before it: these values may never change.
    assert [rollout_seed(0, 1, 0), rollout_seed(0, 1, 1), rollout_seed(0, 2, 0), rollout_seed(1, 1, 0)] == [
        158391683, 701409422, 1114071773, 2082473590
    ]


def test_played_groups_come_back_in_group_order():
    played = [([0, 2], ["a0", "a1", "c0", "c1"]), ([1], ["b0", "b1"])]
    assert in_group_order(played, 2) == ["a0", "a1", "b0", "b1", "c0", "c1"]


def _rewarded(episodes, rewards):
    played = copy.deepcopy(episodes)
    for record, reward in zip(played, rewards, strict=True):
        record.episode = dataclasses.replace(record.episode, reward=reward)
    return played


def test_scoring_trains_on_informative_groups_only_with_normalized_advantages(episodes):
    played = _rewarded(episodes, [1.0, 0.0, 0.0, 0.0])  # group 0 differs, group 1 does not
    scored = score_episodes(played, group_size=2, norm_by_std=True, history=1, size=7)
    assert scored.informative.tolist() == [True, False]
    assert len(scored.contexts) == played[0].turns + played[1].turns and set(scored.group_of) == {0}
    std = torch.tensor([1.0, 0.0]).std().item()
    expected = [0.5 / std] * played[0].turns + [-0.5 / std] * played[1].turns
    assert scored.advantages == pytest.approx(expected, rel=1e-5)
    tokens = [sum(len(c) for e in played[g : g + 2] for c in e.completions) for g in (0, 2)]
    assert scored.group_tokens == {0: tokens[0], 1: tokens[1]}  # the uninformative group's tokens count too
    centered = score_episodes(played, group_size=2, norm_by_std=False, history=1, size=7)
    assert centered.advantages[0] == 0.5


def test_step_log_reports_rewards_rollouts_and_stage_times():
    def record(reward: float, completions: list[list[int]]) -> EpisodeRecord:
        episode = Episode(seed=None, solved=reward > 0, turns=len(completions), reward=reward)
        return EpisodeRecord({}, [], ["r"] * len(completions), completions, episode=episode)

    played = [record(1.0, [[1, 2], [3]]), record(0.0, [[4]]), record(0.0, [[5, 6]]), record(0.0, [[7]])]
    scored = Scored(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.tensor([True, False]), [None] * 3, [], [], [], {})
    logged = step_log(played, scored, started=10.0, synced=11.0, rolled=13.0, done=16.0)
    assert logged == {
        "reward/avg_raw_reward": 0.25,
        "reward/solved_fraction": 0.25,
        "reward/informative_groups": 0.5,
        "rollout/mean_turns": 1.25,
        "rollout/samples": 3.0,
        "rollout/tokens_per_s": 3.5,  # 7 tokens over the 2 s of rollout
        "timing/weight_sync_s": 1.0,
        "timing/rollout_s": 2.0,
        "timing/update_s": 3.0,
        "timing/step_s": 6.0,
    }


def test_the_running_average_moves_toward_the_current_weights_in_place():
    average = {"w": torch.tensor([1.0, 2.0])}
    kept = average["w"]
    ema_update(average, {"w": torch.tensor([3.0, 6.0])}, decay=0.75)
    assert average["w"] is kept and average["w"].tolist() == [1.5, 3.0]


def test_checkpoints_beyond_the_newest_kept_are_pruned():
    assert checkpoints_to_prune([3, 1, 2], 2) == [1]
    assert checkpoints_to_prune([3, 1, 2], 5) == []
    assert checkpoints_to_prune([3, 1, 2], -1) == []  # -1 keeps all
