"""Frozen held-out maze sets: init states on disk, a sha256 manifest, and a training filter.

Sets (files in ``workload/maze/heldout/``, hashes in ``manifest.json``):
- ``easy-64``: size 9, seeds 0..63 through VisGym's seeding path; the published run's set.
- ``rehearsal-7x7-64``: size 7: the seeds from 0 upward, skipping a seed whose layout repeats
  an earlier one, until 64 distinct layouts (a 7x7 maze has only 192 spanning trees x 4 corner
  pairs = 768 layouts, so repeats are common). Held out by layout only: training sees its maps
  with other corner pairs.
- ``rehearsal-7x7-maps``: size 7, the CPU rehearsal's set, held out by map: 32 maps (a sixth of
  the 192), each with all four corner pairs (128 mazes), none of them a map of
  ``rehearsal-7x7-64`` (the set earlier recipe defaults were tuned against). Training filters
  these maps out with every corner pair (``training_seed_filter``).

Mazes are stored as init states rather than replayed from seeds because NumPy does not
promise the same random stream across versions. ``load_set`` refuses a file whose sha256
differs from the manifest; ``freeze_set`` regenerates a set and its manifest line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from workload.errors import SkymazeError
from workload.files import write_bytes_atomic, write_json_atomic
from workload.maze.generator import generate_from_seed
from workload.maze.solver import shortest_path_len

HELDOUT_DIR = Path(__file__).with_name("heldout")
MANIFEST_NAME = "manifest.json"
SET_SIZE = 64  # the published run evaluates on 64 mazes


CORNER_PAIRS = 4  # opposite-corner (agent, target) pairs a map is played with (VisGym)


@dataclass(frozen=True)
class SetSpec:
    """How a set is generated: maze size, whether repeated layouts are skipped, and for a set
    held out by map, how many maps (each with every corner pair) and which sets' maps to avoid."""

    size: int
    description: str
    distinct_layouts: bool
    maps: int = 0  # 0: SET_SIZE mazes from seed 0 up; N: N whole maps x CORNER_PAIRS
    avoid: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        """Mazes in the set."""
        return self.maps * CORNER_PAIRS if self.maps else SET_SIZE

    @property
    def by_map(self) -> bool:
        return self.maps > 0


SPECS = {
    "easy-64": SetSpec(size=9, description="VisGym maze_2d/easy, seeds 0..63", distinct_layouts=False),
    "rehearsal-7x7-64": SetSpec(
        size=7,
        description="7x7 for the CPU rehearsal: seeds from 0 up, repeated layouts skipped, 64 distinct",
        distinct_layouts=True,
    ),
    "rehearsal-7x7-maps": SetSpec(
        size=7,
        description="7x7 for the CPU rehearsal, held out by map: 32 maps x 4 corner pairs, no map of rehearsal-7x7-64",
        distinct_layouts=True,
        maps=32,
        avoid=("rehearsal-7x7-64",),
    ),
}


class HeldoutIntegrityError(SkymazeError, ValueError):
    """A frozen set's file does not match its manifest hash (or the manifest lacks it): exit 1."""


class HeldoutMissingError(SkymazeError, FileNotFoundError):
    """A frozen set's file or its manifest is missing: exit 1; the message names the command that writes it."""


@dataclass(frozen=True)
class HeldoutSet:
    """A loaded set; each entry is ``{"seed", "init_state", "shortest_path_len"}``."""

    name: str
    size: int
    entries: tuple[dict, ...]

    @property
    def seeds(self) -> list[int]:
        """The seeds, in set order."""
        return [entry["seed"] for entry in self.entries]

    @property
    def path_lens(self) -> list[int]:
        """Shortest-path move counts (stop not counted), in set order."""
        return [entry["shortest_path_len"] for entry in self.entries]


def layout_hash(init_state: dict) -> str:
    """A digest of the maze map, agent and target: equal exactly when two mazes are the same episode."""
    grid = np.asarray(init_state["maze_map"], dtype=np.uint8)
    digest = hashlib.sha256()
    digest.update(np.asarray(grid.shape, dtype=np.int64).tobytes())
    digest.update(grid.tobytes())
    digest.update(
        np.asarray([*init_state["agent_location"], *init_state["target_location"]], dtype=np.int64).tobytes()
    )
    return digest.hexdigest()


def map_hash(init_state: dict) -> str:
    """A digest of the maze map alone (walls, no corners): equal exactly when two mazes share a map."""
    grid = np.asarray(init_state["maze_map"], dtype=np.uint8)
    digest = hashlib.sha256()
    digest.update(np.asarray(grid.shape, dtype=np.int64).tobytes())
    digest.update(grid.tobytes())
    return digest.hexdigest()


def corner_index(init_state: dict, size: int) -> int:
    """Which of the four corner pairs (VisGym's order) the maze starts and ends in."""
    from workload.maze.generator import corner_pairs

    pair = (tuple(init_state["agent_location"]), tuple(init_state["target_location"]))
    return corner_pairs(size).index(pair)


def whole_maps(
    maps: int, size: int, *, first_seed: int, accept: Callable[[int], bool] = lambda seed: True
) -> list[dict]:
    """``maps`` maps, each with all four corner pairs, from the seeds ``first_seed`` up.

    Maps are taken in the order they first appear among accepted seeds; each corner pair's
    entry is the first accepted seed that plays it (so every entry is a real VisGym seed).
    Entries are ordered map by map, corner pair by corner pair.
    """
    order: list[str] = []
    found: dict[str, dict[int, dict]] = {}
    seed = first_seed
    while len(order) < maps or any(len(found[m]) < CORNER_PAIRS for m in order[:maps]):
        if accept(seed):
            state = generate_from_seed(seed, size)
            key = map_hash(state)
            if key not in found:
                found[key] = {}
                order.append(key)
            corners = found[key]
            corner = corner_index(state, size)
            if corner not in corners:
                corners[corner] = {"seed": seed, "shortest_path_len": shortest_path_len(state), "init_state": state}
        seed += 1
    return [found[key][c] for key in order[:maps] for c in range(CORNER_PAIRS)]


def _check_name(name: str) -> SetSpec:
    if name not in SPECS:
        raise ValueError(f"unknown held-out set {name!r}; known sets: {sorted(SPECS)}")
    return SPECS[name]


def size_mismatch(set_name: str, maze_size: int, *, size_key: str, set_key: str) -> str | None:
    """Why ``maze_size`` and the held-out set ``set_name`` cannot go together (None when they can).

    Training on one size and evaluating on another fails at the first evaluation (every
    held-out init state is the wrong shape), long after the run started.
    """
    if set_name not in SPECS:
        return f"{set_key}: unknown held-out set {set_name!r}. Fix: choose one of {sorted(SPECS)}."
    set_size = SPECS[set_name].size
    if set_size == maze_size:
        return None
    same_size = sorted(name for name, spec in SPECS.items() if spec.size == maze_size)
    choice = f"choose a {maze_size}x{maze_size} set ({', '.join(same_size)})" if same_size else (
        f"no frozen set is {maze_size}x{maze_size}; freeze one first"
    )
    return (
        f"{set_key}: {set_name!r} holds {set_size}x{set_size} mazes but {size_key} is {maze_size}. "
        f"Fix: set {size_key}={set_size}, or {choice}."
    )


def build_entries(name: str) -> list[dict]:
    """Generate a set's entries from its spec (what ``freeze_set`` writes)."""
    spec = _check_name(name)
    if spec.by_map:
        avoided = {map_hash(e["init_state"]) for other in spec.avoid for e in load_set(other).entries}
        return whole_maps(
            spec.maps, spec.size, first_seed=0,
            accept=lambda seed: map_hash(generate_from_seed(seed, spec.size)) not in avoided,
        )
    entries, seen, seed = [], set(), 0
    while len(entries) < SET_SIZE:
        state = generate_from_seed(seed, spec.size)
        key = layout_hash(state)
        if not (spec.distinct_layouts and key in seen):
            seen.add(key)
            entries.append({"seed": seed, "shortest_path_len": shortest_path_len(state), "init_state": state})
        seed += 1
    return entries


def _serialise(name: str, entries: list[dict]) -> bytes:
    spec = SPECS[name]
    header = json.dumps({"name": name, "size": spec.size, "description": spec.description})
    lines = ",\n".join("  " + json.dumps(entry, sort_keys=True, separators=(",", ":")) for entry in entries)
    return f'{header[:-1]}, "entries": [\n{lines}\n]}}\n'.encode()


def freeze_set(name: str, directory: Path = HELDOUT_DIR) -> Path:
    """Regenerate ``<name>.json`` and its manifest hash in ``directory``, both written atomically."""
    data = _serialise(name, build_entries(name))
    path = write_bytes_atomic(directory / f"{name}.json", data)
    manifest_path = directory / MANIFEST_NAME
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest[path.name] = hashlib.sha256(data).hexdigest()
    write_json_atomic(manifest_path, manifest)
    return path


def load_set(name: str, directory: Path = HELDOUT_DIR) -> HeldoutSet:
    """Load a frozen set after checking its sha256 against the manifest."""
    spec = _check_name(name)
    path = directory / f"{name}.json"
    manifest_path = directory / MANIFEST_NAME
    if not path.exists() or not manifest_path.exists():
        raise HeldoutMissingError(
            f"{path} or {manifest_path} is missing; run `skymaze maze freeze --heldout {name}`"
        )
    data = path.read_bytes()
    expected = json.loads(manifest_path.read_text()).get(path.name)
    actual = hashlib.sha256(data).hexdigest()
    if expected != actual:
        raise HeldoutIntegrityError(
            f"{path} has sha256 {actual}, the manifest says {expected}: a frozen held-out set must not "
            f"change. Restore it (git checkout -- {path.name}), or if the change is intended, regenerate "
            f"it with `skymaze maze freeze --heldout {name}` and say so, since scores stop being comparable."
        )
    doc = json.loads(data)
    if doc.get("size") != spec.size or len(doc.get("entries", ())) != spec.count:
        raise HeldoutIntegrityError(f"{path} does not hold {spec.count} mazes of size {spec.size}")
    return HeldoutSet(name=name, size=spec.size, entries=tuple(doc["entries"]))


def training_seed_filter(
    size: int, heldout_names: Iterable[str], directory: Path = HELDOUT_DIR
) -> Callable[[int], bool]:
    """``keep(seed)``: True when the seed's maze (VisGym seeding path) is in none of the named sets;
    for a set held out by map, when its map is in none of them (with any corner pair)."""
    layouts, maps = set(), set()
    for name in heldout_names:
        held = load_set(name, directory)
        if held.size == size:  # mazes of another size can never collide
            into, digest = (maps, map_hash) if SPECS[name].by_map else (layouts, layout_hash)
            into.update(digest(entry["init_state"]) for entry in held.entries)

    def keep(seed: int) -> bool:
        state = generate_from_seed(seed, size)
        return layout_hash(state) not in layouts and map_hash(state) not in maps

    return keep
