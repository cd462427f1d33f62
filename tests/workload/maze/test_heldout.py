"""Frozen held-out sets: manifest hashes, refusal of changed files, regeneration, the training filter."""

from __future__ import annotations

import collections
import json
import shutil

import pytest

from workload.maze.generator import generate_from_seed
from workload.maze.heldout import (
    HELDOUT_DIR,
    MANIFEST_NAME,
    SPECS,
    HeldoutIntegrityError,
    corner_index,
    freeze_set,
    layout_hash,
    load_set,
    map_hash,
    training_seed_filter,
)
from workload.maze.solver import shortest_path_len


@pytest.fixture
def heldout_copy(tmp_path):
    shutil.copytree(HELDOUT_DIR, tmp_path / "heldout")
    return tmp_path / "heldout"


def test_easy_64_is_the_published_set():
    held = load_set("easy-64")
    assert (held.name, held.size, held.seeds) == ("easy-64", 9, list(range(64)))
    assert collections.Counter(held.path_lens) == {12: 50, 16: 14}
    first = held.entries[0]
    assert first["init_state"] == generate_from_seed(0, 9)
    assert first["shortest_path_len"] == shortest_path_len(first["init_state"]) == 12


def test_rehearsal_set_is_64_distinct_7x7_layouts():
    held = load_set("rehearsal-7x7-64")
    assert held.size == 7 and len(held.entries) == 64
    assert len({layout_hash(entry["init_state"]) for entry in held.entries}) == 64
    assert held.seeds == sorted(held.seeds) and held.seeds[0] == 0
    for entry in held.entries:
        assert entry["init_state"] == generate_from_seed(entry["seed"], 7)
        assert entry["shortest_path_len"] == shortest_path_len(entry["init_state"])


def test_rehearsal_set_holds_out_whole_maps_with_all_four_corner_pairs():
    held = load_set("rehearsal-7x7-maps")
    assert held.size == 7 and len(held.entries) == 128
    by_map = collections.defaultdict(set)
    for entry in held.entries:
        assert entry["init_state"] == generate_from_seed(entry["seed"], 7)  # a real VisGym seed
        by_map[map_hash(entry["init_state"])].add(corner_index(entry["init_state"], 7))
    assert len(by_map) == 32 and all(corners == {0, 1, 2, 3} for corners in by_map.values())
    tuned_against = {map_hash(entry["init_state"]) for entry in load_set("rehearsal-7x7-64").entries}
    assert not tuned_against & set(by_map)


def test_training_filter_drops_every_corner_pair_of_a_held_out_map():
    held = load_set("rehearsal-7x7-maps")
    keep = training_seed_filter(7, ["rehearsal-7x7-maps"])
    maps = {map_hash(entry["init_state"]) for entry in held.entries}
    seeds = range(1_000_000, 1_003_000)
    on_held_maps = [s for s in seeds if map_hash(generate_from_seed(s, 7)) in maps]
    assert on_held_maps and not any(keep(s) for s in on_held_maps)
    assert all(keep(s) for s in seeds if s not in set(on_held_maps))


@pytest.mark.parametrize("name", sorted(SPECS))
def test_regenerating_reproduces_the_committed_bytes(name, tmp_path):
    path = freeze_set(name, tmp_path)
    assert path.read_bytes() == (HELDOUT_DIR / path.name).read_bytes()
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest[path.name] == json.loads((HELDOUT_DIR / MANIFEST_NAME).read_text())[path.name]
    assert not list(tmp_path.glob(".*.tmp"))  # no temp files left behind


def test_a_changed_file_is_refused(heldout_copy):
    path = heldout_copy / "easy-64.json"
    path.write_bytes(path.read_bytes().replace(b'"seed":5,', b'"seed":500,'))
    with pytest.raises(HeldoutIntegrityError, match="must not change"):
        load_set("easy-64", heldout_copy)


def test_a_set_missing_from_the_manifest_is_refused(heldout_copy):
    (heldout_copy / MANIFEST_NAME).write_text("{}")
    with pytest.raises(HeldoutIntegrityError, match="the manifest says None"):
        load_set("rehearsal-7x7-64", heldout_copy)


def test_a_missing_file_says_how_to_rebuild(tmp_path):
    with pytest.raises(FileNotFoundError, match="skymaze maze freeze --heldout easy-64"):
        load_set("easy-64", tmp_path)


def test_unknown_set_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="known sets"):
        load_set("easy-65")


def test_training_filter_drops_exactly_the_held_out_layouts():
    keep = training_seed_filter(7, ["rehearsal-7x7-64"])
    held = {layout_hash(e["init_state"]) for e in load_set("rehearsal-7x7-64").entries}
    for seed in range(400):
        assert keep(seed) == (layout_hash(generate_from_seed(seed, 7)) not in held)
    assert not any(keep(seed) for seed in load_set("rehearsal-7x7-64").seeds)
    assert sum(keep(seed) for seed in range(400)) > 300


def test_training_filter_for_size_9_drops_seeds_0_to_63_only_sizes_that_match():
    keep = training_seed_filter(9, ["easy-64", "rehearsal-7x7-64"])
    assert [seed for seed in range(100) if not keep(seed)] == list(range(64))


def test_layout_hash_sees_corners():
    state = generate_from_seed(0, 9)
    swapped = {
        **state,
        "agent_location": state["target_location"],
        "target_location": state["agent_location"],
    }
    assert layout_hash(state) != layout_hash(swapped)
    assert layout_hash(state) == layout_hash(json.loads(json.dumps(state)))
