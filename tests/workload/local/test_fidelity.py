"""The rehearsal and cluster recipes share SkyRL's key names: every shared key has the same value
in both or a stated reason, and docs/rehearsal.md prints exactly that table."""

from __future__ import annotations

from pathlib import Path

from workload.local import fidelity

DOC = Path(__file__).resolve().parents[3] / "docs" / "rehearsal.md"


def test_every_shared_key_that_differs_has_a_reason():
    local, cluster = fidelity.recipes()
    assert len(fidelity.shared(local, cluster)) >= 15  # the recipes really share SkyRL's names
    assert fidelity.undocumented(local, cluster) == []


def test_every_reason_names_a_shared_key_that_really_differs():
    local, cluster = fidelity.recipes()
    assert set(fidelity.REASONS) == set(fidelity.differing(local, cluster))


def test_a_change_to_a_shared_key_without_a_reason_is_caught():
    local, cluster = fidelity.recipes()
    assert local["generator.n_samples_per_prompt"] == cluster["generator.n_samples_per_prompt"]
    changed = {**local, "generator.n_samples_per_prompt": 4}
    assert fidelity.undocumented(changed, cluster) == ["generator.n_samples_per_prompt"]


def test_the_rehearsal_page_prints_the_current_table():
    assert fidelity.markdown() in DOC.read_text(), (
        "docs/rehearsal.md is out of date: paste `python -c 'from workload.local import fidelity; "
        "print(fidelity.markdown())'` into its fidelity section"
    )
