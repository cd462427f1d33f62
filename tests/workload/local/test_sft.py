"""SFT warm start: the loss falls, the stopping rule decides, progress resumes from its checkpoint."""

from __future__ import annotations

import pytest
import torch

from workload.local import constants
from workload.local.config import load_config
from workload.local.data import demonstration_batch, validation_set
from workload.local.policy import Encoder
from workload.local.rundir import RunDir
from workload.local.sft import run_sft, sft_loss

pytestmark = pytest.mark.slow  # every test here trains the tiny model

SMALL = ["rehearsal.sft.batch_size=8", "rehearsal.sft.validation_size=4", "generator.max_turns=3"]


@pytest.fixture(autouse=True)
def _check_every_two_steps(monkeypatch):
    monkeypatch.setattr(constants, "SFT_CHECK_EVERY", 2)


def _cap(monkeypatch, max_steps: int) -> None:
    monkeypatch.setattr(constants, "SFT_MAX_STEPS", max_steps)


def _fresh(tiny_model_dir):
    from workload.model.tiny import load_tiny

    model, processor = load_tiny(tiny_model_dir)
    return model, Encoder(processor)


def _accept(seed: int) -> bool:
    return True


def test_loss_falls_on_repeated_demonstrations(tiny_model_dir):
    model, encoder = _fresh(tiny_model_dir)
    contexts, labels = demonstration_batch(
        16, seed=0, step=0, size=7, cell_px=8, history=1, path_fraction=0.5, accept=_accept
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    losses = []
    for _ in range(8):
        loss = sft_loss(model, encoder, contexts, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0]


def _run(tiny_model_dir, root, overrides, logged):
    cfg = load_config("local", SMALL + overrides)
    model, encoder = _fresh(tiny_model_dir)
    validation = validation_set(cfg.rehearsal.sft.validation_size, size=7, accept=_accept)
    result = run_sft(
        model=model,
        encoder=encoder,
        cfg=cfg,
        run=RunDir(root),
        accept=_accept,
        validation=validation,
        log=lambda phase, step, metrics: logged.append((phase, step, metrics)),
    )
    return result, model


def test_target_reached_at_the_first_check_stops_there(tiny_model_dir, tmp_path, monkeypatch):
    logged = []
    _cap(monkeypatch, 10)
    result, _ = _run(tiny_model_dir, tmp_path, ["rehearsal.sft.target_solved=0"], logged)
    assert result.steps == 2
    assert [m["sft/validation_solved"] for _, _, m in logged] == [result.validation_solved]


def test_unreachable_target_runs_to_max_steps_checking_on_schedule(tiny_model_dir, tmp_path, monkeypatch):
    logged = []
    _cap(monkeypatch, 5)
    result, _ = _run(tiny_model_dir, tmp_path, ["rehearsal.sft.target_solved=4"], logged)
    assert result.steps == 5
    assert [step for _, step, _ in logged] == [2, 4, 5]


def test_resume_from_the_sft_checkpoint_matches_an_uninterrupted_run(tiny_model_dir, tmp_path, monkeypatch):
    overrides = ["rehearsal.sft.target_solved=4"]
    _cap(monkeypatch, 4)
    _, straight = _run(tiny_model_dir, tmp_path / "a", overrides, [])
    # Interrupted after the step-2 check: its checkpoint holds step 2; the rerun continues from it.
    _cap(monkeypatch, 2)
    _run(tiny_model_dir, tmp_path / "b", overrides, [])
    _cap(monkeypatch, 4)
    state = torch.load(tmp_path / "b" / "ckpts" / "sft" / "state.pt", weights_only=False)
    assert state["step"] == 2
    logged = []
    result, resumed = _run(tiny_model_dir, tmp_path / "b", overrides, logged)
    assert logged[0][2] == {"sft/resumed_from_step": 2}
    assert result.steps == 4
    for (name, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
