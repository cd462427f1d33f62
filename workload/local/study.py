"""The study behind the rehearsal's claim: GRPO vs SFT continued, from an SFT start at a validation plateau.

The protocol (docs/study.md) was fixed before any seed ran; this module runs it. Per seed
(``run_seed``): build the tiny model, train it with full-parameter SFT on path-only solver
demonstrations until the validation count plateaus (``PlateauRule``), then from that start train
two arms that differ only in their learning signal (the same fresh LoRA, AdamW, schedule and
weight average): GRPO (``InProcessLearner``, the rehearsal's learner with rollouts played in this
process) and SFT continued (``sft_arm_step``), each for the same training CPU seconds, evaluated
at equal shares of it; each arm reports its evaluation with the most validation solves. Across
seeds (``summarise``): the paired t-test on the held-out difference and the pre-registered verdict.

Mazes are held out by rotation/reflection class (``class_split``): no held-out or validation map
is a rotated or mirrored copy of a map training sees. Process CPU is ``os.times`` (user + system,
children included), never wall time.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
import os
import statistics
from collections.abc import Callable, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from workload.files import write_dir_atomic, write_json_atomic
from workload.local.stats import SIGNIFICANCE, mcnemar_exact

MAZE_SIZE = 7
# Spanning trees of the 3x3 cell lattice a 7x7 maze's inner cells form (Kirchhoff's theorem): every map
# appears among the seeds 0..1076 (class_split enumerates until it has them all).
MAPS_7X7 = 192
SQUARE_SYMMETRIES = 8  # 4 rotations x (identity, transpose): the dihedral group of the square
STUDY_OVERRIDES = (  # the rehearsal recipe `local`, with the one change the protocol makes to it
    "trainer.policy.optimizer_config.scheduler=constant_with_warmup",  # arms run to a CPU budget, not a step count
    f"rehearsal.maze_size={MAZE_SIZE}",
)


@dataclasses.dataclass(frozen=True)
class StudySettings:
    """The protocol's numbers (docs/study.md, fixed before any seed ran)."""

    seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5)
    heldout_maps: int = 32  # the held-out set: the first classes (sha256 order) until at least this many maps
    validation_maps: int = 16  # validation: the next classes until at least this many maps
    sft_check_every: int = 25  # SFT steps between validation checks
    sft_patience_checks: int = 4  # stop after this many checks without a new best validation count
    sft_max_steps: int = 800
    path_fraction: float = 1.0  # demonstrations on the solver's path only: no recovery label
    arm_budget_cpu_s: float = 75.0  # training CPU seconds of each arm
    arm_evaluations: int = 4  # evaluations of each arm, at equal shares of its budget
    margin_fraction: float = 0.05  # the equivalence margin, a share of the held-out set


PROTOCOL = StudySettings()


def cpu_seconds() -> float:
    """This process's CPU time: user + system, waited-for children included."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


# -- held out by rotation/reflection class ------------------------------------------------------------------
def map_class(maze_map: Any) -> str:
    """The sha256 of a map's canonical form: the smallest byte string among its 8 rotations and reflections."""
    grid = np.asarray(maze_map, dtype=np.uint8)
    forms = []
    for turns in range(4):
        rotated = np.rot90(grid, turns)
        forms += [np.ascontiguousarray(rotated).tobytes(), np.ascontiguousarray(rotated.T).tobytes()]
    return hashlib.sha256(min(forms)).hexdigest()


@cache
def map_classes() -> dict[bytes, str]:
    """Every 7x7 map (its bytes) -> its class, enumerated from seed 0 up until all ``MAPS_7X7`` are found."""
    from workload.maze.generator import generate_from_seed

    found: dict[bytes, str] = {}
    seed = 0
    while len(found) < MAPS_7X7:
        grid = np.asarray(generate_from_seed(seed, MAZE_SIZE)["maze_map"], dtype=np.uint8)
        found.setdefault(grid.tobytes(), map_class(grid))
        seed += 1
    return found


def seed_class(seed: int) -> str:
    from workload.maze.generator import generate_from_seed

    return map_classes()[np.asarray(generate_from_seed(seed, MAZE_SIZE)["maze_map"], dtype=np.uint8).tobytes()]


@dataclasses.dataclass(frozen=True)
class Split:
    heldout: Any  # HeldoutSet: whole maps of whole classes, each with its 4 corner pairs
    validation: Any
    heldout_classes: frozenset[str]
    validation_classes: frozenset[str]

    def accept(self, seed: int) -> bool:
        """Training may use ``seed``: its map's class is neither held out nor validation."""
        cls = seed_class(seed)
        return cls not in self.heldout_classes and cls not in self.validation_classes


def _take_classes(order: list[str], sizes: dict[str, int], at_least: int) -> list[str]:
    taken, maps = [], 0
    for cls in order:
        if maps >= at_least:
            break
        taken.append(cls)
        maps += sizes[cls]
    return taken


@cache
def class_split(heldout_maps: int = PROTOCOL.heldout_maps, validation_maps: int = PROTOCOL.validation_maps) -> Split:
    """Held-out and validation sets of whole classes, in sha256 order of the classes (blind to the task)."""
    from workload.maze.heldout import CORNER_PAIRS, HeldoutSet, whole_maps

    sizes: dict[str, int] = {}
    for cls in map_classes().values():
        sizes[cls] = sizes.get(cls, 0) + 1
    order = sorted(sizes)
    held = _take_classes(order, sizes, heldout_maps)
    val = _take_classes(order[len(held):], sizes, validation_maps)

    def whole(classes: list[str], name: str) -> Any:
        members = set(classes)
        maps = sum(sizes[c] for c in classes)
        entries = whole_maps(maps, MAZE_SIZE, first_seed=0, accept=lambda seed: seed_class(seed) in members)
        return HeldoutSet(name=f"{name}-{MAZE_SIZE}x{MAZE_SIZE}-{maps * CORNER_PAIRS}-classes", size=MAZE_SIZE,
                          entries=tuple(entries))

    return Split(whole(held, "study-heldout"), whole(val, "study-validation"), frozenset(held), frozenset(val))


# -- state checks --------------------------------------------------------------------------------------------
def off_path_states(entry: dict, cfg: Any) -> tuple[list[Any], list[str]]:
    """Every floor cell off the shortest path of ``entry``, the agent standing there (its first frame), and the
    solver's action from there: states path-only demonstrations never label."""
    from workload.local import constants
    from workload.local.policy import turn_context
    from workload.maze.env import Maze2D
    from workload.maze.solver import path_to_actions, shortest_path

    state = entry["init_state"]
    maze_map = np.asarray(state["maze_map"])
    goal = tuple(state["target_location"])
    on_path = {tuple(cell) for cell in shortest_path(maze_map, state["agent_location"], goal)}
    env = Maze2D(MAZE_SIZE, cell_px=constants.CELL_PX)
    contexts, labels = [], []
    for cell in (tuple(int(v) for v in c) for c in np.argwhere(maze_map == 0)):
        if cell in on_path:
            continue
        frame = env.reset(init_state={**state, "agent_location": list(cell)})[0]
        contexts.append(turn_context([frame], [], 0, history=cfg.rehearsal.image_history, size=MAZE_SIZE))
        labels.append(path_to_actions(shortest_path(maze_map, cell, goal))[0])
    return contexts, labels


def state_check(encoder: Any, held: Any, cfg: Any) -> Any:
    """A ``PathCheck`` over the off-path states of every maze of ``held`` (its ``accuracy``)."""
    from workload.local.evaluator import PathCheck

    return PathCheck(encoder, held, cfg, states=off_path_states)


@dataclasses.dataclass
class Checks:
    """What every evaluation measures, the prompts built once."""

    split: Split
    validation_path: Any  # PathCheck on validation: the plateau rule's count
    heldout_path: Any  # PathCheck on held-out: on-path accuracy
    heldout_off_path: Any  # off-path accuracy

    def evaluate(self, model: Any, encoder: Any, cfg: Any) -> dict:
        from workload.local.evaluator import evaluate_heldout

        model.eval()
        checked, _ = evaluate_heldout(model, encoder, self.split.validation, cfg)
        report, _ = evaluate_heldout(model, encoder, self.split.heldout, cfg)
        by_seed = {e["seed"]: bool(e["solved"]) for e in report["episodes"]}
        return {
            "validation_solved": checked["solved"],
            "solved": report["solved"],
            "total": report["total"],
            "per_maze": [by_seed[s] for s in self.split.heldout.seeds],
            "on_path_accuracy": self.heldout_path.accuracy(model),
            "off_path_accuracy": self.heldout_off_path.accuracy(model),
        }


# -- the start: SFT on path-only demonstrations to a validation plateau -------------------------------------
@dataclasses.dataclass
class PlateauRule:
    """Stop at the first check after which the best count has not improved for ``patience`` checks, counting
    from the first check with a count above 0 (before it, the model has not left the action marginal and the
    count is flat at 0 without having converged: docs/study.md, the amendment)."""

    patience: int
    best: int = 0
    since_best: int = 0

    def stops(self, count: int) -> bool:
        if count > self.best:
            self.best, self.since_best = count, 0
        elif self.best > 0:
            self.since_best += 1
        return self.since_best >= self.patience


def demonstrations(cfg: Any, settings: StudySettings, seed: int, step: int, accept: Callable[[int], bool]):
    from workload.local import constants
    from workload.local.data import demonstration_batch

    return demonstration_batch(cfg.rehearsal.sft.batch_size, seed=seed, step=step, size=MAZE_SIZE,
                               cell_px=constants.CELL_PX, history=cfg.rehearsal.image_history,
                               path_fraction=settings.path_fraction, accept=accept)


def train_start(model: Any, encoder: Any, cfg: Any, settings: StudySettings, seed: int, checks: Checks,
                echo: Callable[[str], None]) -> dict:
    """Full-parameter SFT in place until the plateau rule (or the step cap) stops it."""
    import torch

    from workload.local import constants
    from workload.local.sft import sft_loss, sft_optimizer

    opt, sched = sft_optimizer(model, cfg)
    rule = PlateauRule(settings.sft_patience_checks)
    history, step, reason = [], 0, "cap"
    while step < settings.sft_max_steps:
        model.train()
        contexts, labels = demonstrations(cfg, settings, seed, step, checks.split.accept)
        loss = sft_loss(model, encoder, contexts, labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), constants.SFT_MAX_GRAD_NORM)
        opt.step()
        sched.step()
        step += 1
        if step % settings.sft_check_every:
            continue
        model.eval()
        count = sum(checks.validation_path(model))
        history.append({"step": step, "loss": loss.item(), "validation_path_solved": count})
        echo(f"[study seed {seed}] sft step {step} loss {loss.item():.3g} validation {count}/"
             f"{checks.validation_path.mazes}")
        if rule.stops(count):
            reason = "plateau"
            break
    model.eval()
    return {"sft_steps": step, "stop": reason, "best_validation_path_solved": rule.best, "history": history}


# -- the arms --------------------------------------------------------------------------------------------------
def study_config(seed: int) -> Any:
    from workload.local.config import load_config

    return load_config("local", [*STUDY_OVERRIDES, f"trainer.seed={seed}"])


def _grpo_learner(model: Any, encoder: Any, cfg: Any, split: Split, workdir: Path) -> Any:
    """The rehearsal's GRPO learner with rollouts played in this process by the learner's own model
    (no Ray: the study measures training CPU, not the cluster's plumbing)."""
    import dataclasses as dc

    from workload.local import constants
    from workload.local.data import PHASE_GRPO, draw_seeds
    from workload.local.episodes import play
    from workload.local.evaluator import eval_settings
    from workload.local.grpo_trainer import GrpoLearner, rollout_seed
    from workload.local.rundir import RunDir
    from workload.maze.generator import generate_from_seed

    rollout = dc.replace(eval_settings(cfg), temperature=cfg.generator.sampling_params.temperature,
                         max_new_tokens=constants.MAX_GENERATE_LENGTH)

    class InProcessLearner(GrpoLearner):
        def sync_weights(self) -> None:  # the learner's model plays: nothing to push
            return None

        def rollouts(self, step: int) -> list:
            t, n = self.cfg.trainer, self.cfg.generator.n_samples_per_prompt
            seeds = draw_seeds(t.train_batch_size, seed=t.seed, phase=PHASE_GRPO, step=step, accept=self.accept)
            states = [generate_from_seed(s, MAZE_SIZE) for s in seeds]
            self.model.eval()
            return play(self.model, self.encoder, [s for s in states for _ in range(n)], rollout,
                        seeds=[s for s in seeds for _ in range(n)], generator_seed=rollout_seed(t.seed, step, 0))

    return InProcessLearner(cfg=cfg, run=RunDir(workdir), model=model, encoder=encoder, workers=[], ray=None,
                            heldout=split.heldout, accept=split.accept, log=lambda *a: None,
                            on_eval=lambda *a: None, validation=split.validation)


def run_arm(name: str, start: Any, encoder: Any, cfg: Any, settings: StudySettings, checks: Checks,
            start_sft_steps: int, workdir: Path, echo: Callable[[str], None]) -> dict:
    """Train one arm from a copy of ``start`` for ``arm_budget_cpu_s`` training CPU seconds, evaluating its
    weight average at equal shares of the budget; returns every evaluation and the one validation selects."""
    import torch

    from workload.local.control import evaluation_marks, marks_after, select_point
    from workload.local.grpo_trainer import PolicyState
    from workload.local.rollout import attach_lora
    from workload.local.rundir import RunDir
    from workload.local.sft import sft_loss

    seed = cfg.trainer.seed
    torch.manual_seed(seed)
    model = attach_lora(copy.deepcopy(start), cfg.trainer.policy.model.lora)
    if name == "grpo":
        learner = _grpo_learner(model, encoder, cfg, checks.split, workdir)
        policy = learner.policy

        def train_step(step: int) -> float:
            return float(learner.step(step)["reward/avg_raw_reward"])
    else:
        policy = PolicyState(model, cfg, RunDir(workdir))

        def train_step(step: int) -> float:
            model.train()
            contexts, labels = demonstrations(cfg, settings, seed, start_sft_steps + step - 1, checks.split.accept)
            loss = sft_loss(model, encoder, contexts, labels)
            policy.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            policy.optimizer_step()
            policy.fold_average()
            return float(loss.item())

    marks = evaluation_marks(settings.arm_budget_cpu_s, settings.arm_evaluations)
    trained_s, step, points = 0.0, 0, []
    while marks:
        before = cpu_seconds()
        step += 1
        signal = train_step(step)
        trained_s += cpu_seconds() - before
        if trained_s < marks[0]:
            continue
        marks = marks_after(marks, trained_s)
        with policy.served_weights():
            point = {"steps": step, "cpu_s": trained_s} | checks.evaluate(model, encoder, cfg)
        points.append(point)
        signal_name = "reward" if name == "grpo" else "loss"
        echo(f"[study seed {seed}] {name} step {step} ({trained_s:.0f} CPU s, last {signal_name} {signal:.3g}): "
             f"validation {point['validation_solved']}/{len(checks.split.validation.entries)}, "
             f"held-out {point['solved']}/{point['total']}")
    chosen = select_point(points)
    return {"train_cpu_s": trained_s, "steps": step, "points": points, "selected_index": points.index(chosen),
            "selected": chosen}


# -- one seed -------------------------------------------------------------------------------------------------
def seed_path(out: Path, seed: int) -> Path:
    return Path(out) / f"seed-{seed}.json"


def run_seed(seed: int, out: Path, settings: StudySettings = PROTOCOL,
             echo: Callable[[str], None] = print) -> dict:
    """One seed of the protocol; writes ``seed-N.json`` atomically at the end (nothing before: a killed
    seed reruns from scratch) and returns it."""
    import torch

    from workload.local import constants
    from workload.local.evaluator import PathCheck
    from workload.local.policy import Encoder
    from workload.model.tiny import build_tiny_model, load_tiny

    torch.set_num_threads(constants.NUM_THREADS)
    spent = cpu_seconds()
    cfg = study_config(seed)
    split = class_split(settings.heldout_maps, settings.validation_maps)
    workdir = Path(out) / "work" / f"seed-{seed}"
    base = workdir / "base"
    write_dir_atomic(base, lambda tmp: build_tiny_model(tmp, seed=seed, preset=cfg.rehearsal.preset))
    model, processor = load_tiny(base)
    encoder = Encoder(processor)
    checks = Checks(split, PathCheck(encoder, split.validation, cfg), PathCheck(encoder, split.heldout, cfg),
                    state_check(encoder, split.heldout, cfg))
    sft_started = cpu_seconds()
    start = train_start(model, encoder, cfg, settings, seed, checks, echo)
    start["cpu_s"] = cpu_seconds() - sft_started
    start["evaluation"] = checks.evaluate(model, encoder, cfg)
    echo(f"[study seed {seed}] start: SFT {start['sft_steps']} steps ({start['stop']}), held-out "
         f"{start['evaluation']['solved']}/{start['evaluation']['total']}")
    arms = {name: run_arm(name, model, encoder, cfg, settings, checks, start["sft_steps"], workdir, echo)
            for name in ("grpo", "sft")}
    result = {
        "seed": seed,
        "settings": dataclasses.asdict(settings),
        "heldout": {"name": split.heldout.name, "seeds": split.heldout.seeds},
        "validation": {"name": split.validation.name, "seeds": split.validation.seeds},
        "start": start,
        "arms": arms,
        "grpo_vs_sft": mcnemar_exact(arms["sft"]["selected"]["per_maze"], arms["grpo"]["selected"]["per_maze"]),
        "cpu_s": cpu_seconds() - spent,
    }
    write_json_atomic(seed_path(out, seed), result)
    return result


# -- across seeds ---------------------------------------------------------------------------------------------
def t_sf(t: float, df: int) -> float:
    """Two-sided p of Student's t: 1 - 2 * integral of the density from 0 to |t| (Simpson's rule)."""
    if df < 1:
        raise ValueError(f"the t-test needs at least 2 seeds (df >= 1), got df = {df}")
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(x: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))

    x, n = abs(t), 2000
    h = x / n
    area = density(0.0) + density(x) + sum((4 if i % 2 else 2) * density(i * h) for i in range(1, n))
    return max(0.0, min(1.0, 1.0 - 2.0 * area * h / 3))


def t_quantile(p_two_sided: float, df: int) -> float:
    """The t with two-sided p ``p_two_sided`` (bisection on ``t_sf``)."""
    lo, hi = 0.0, 100.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if t_sf(mid, df) > p_two_sided:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def verdict(differences: Sequence[float], margin: float) -> dict:
    """The pre-registered verdict on per-seed differences d = GRPO - SFT continued (held-out solves)."""
    n = len(differences)
    if n < 2:
        raise ValueError(f"the verdict needs at least 2 seeds, got {n}")
    mean = statistics.fmean(differences)
    sd = statistics.stdev(differences)
    se = sd / math.sqrt(n)
    p = (0.0 if mean else 1.0) if se == 0 else t_sf(mean / se, n - 1)
    half = t_quantile(2 * SIGNIFICANCE, n - 1) * se  # the 90 % interval: two one-sided tests at 0.05
    interval = (mean - half, mean + half)
    equivalent = -margin < interval[0] and interval[1] < margin
    if equivalent:
        outcome = "no difference"
    elif p < SIGNIFICANCE and mean > 0:
        outcome = "RL adds value"
    elif p < SIGNIFICANCE and mean < 0:
        outcome = "SFT continued is better"
    else:
        outcome = "inconclusive"
    return {"outcome": outcome, "mean_d": mean, "sd_d": sd, "p_value": p, "interval90": list(interval),
            "margin": margin, "seeds": n, "grpo_wins": sum(d > 0 for d in differences),
            "sft_wins": sum(d < 0 for d in differences), "ties": sum(d == 0 for d in differences)}


def _mean_sd(values: Sequence[float]) -> dict:
    return {"mean": statistics.fmean(values), "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
            "values": list(values)}


def summarise(results: Sequence[dict], settings: StudySettings = PROTOCOL) -> dict:
    """The verdict and the secondary figures over finished seeds."""
    total = results[0]["arms"]["grpo"]["selected"]["total"]
    grpo = [r["arms"]["grpo"]["selected"] for r in results]
    sft = [r["arms"]["sft"]["selected"] for r in results]
    starts = [r["start"]["evaluation"] for r in results]
    d = [g["solved"] - s["solved"] for g, s in zip(grpo, sft, strict=True)]
    off_gain = [g["off_path_accuracy"] - s["off_path_accuracy"] for g, s in zip(grpo, sft, strict=True)]
    mech = _mean_sd(off_gain) | ({"p_value": t_sf(statistics.fmean(off_gain) / (statistics.stdev(off_gain) /
                                 math.sqrt(len(off_gain))), len(off_gain) - 1)}
                                 if len(off_gain) > 1 and statistics.stdev(off_gain) > 0 else {})
    return {
        "seeds": [r["seed"] for r in results],
        "heldout_total": total,
        "verdict": verdict(d, settings.margin_fraction * total),
        "start_solved": _mean_sd([s["solved"] for s in starts]),
        "grpo_solved": _mean_sd([g["solved"] for g in grpo]),
        "sft_solved": _mean_sd([s["solved"] for s in sft]),
        "grpo_final_solved": _mean_sd([r["arms"]["grpo"]["points"][-1]["solved"] for r in results]),
        "sft_final_solved": _mean_sd([r["arms"]["sft"]["points"][-1]["solved"] for r in results]),
        "off_path_accuracy": {"start": _mean_sd([s["off_path_accuracy"] for s in starts]),
                              "grpo": _mean_sd([g["off_path_accuracy"] for g in grpo]),
                              "sft": _mean_sd([s["off_path_accuracy"] for s in sft])},
        "on_path_accuracy": {"start": _mean_sd([s["on_path_accuracy"] for s in starts]),
                             "grpo": _mean_sd([g["on_path_accuracy"] for g in grpo]),
                             "sft": _mean_sd([s["on_path_accuracy"] for s in sft])},
        "mechanism_grpo_minus_sft_off_path": mech,
        "cpu_s_per_seed": _mean_sd([r["cpu_s"] for r in results]),
    }


def table(results: Sequence[dict], summary: dict) -> str:
    """The per-seed table and the verdict, as printed."""
    total = summary["heldout_total"]
    lines = ["seed  start  grpo  sft   d   sft steps (stop)   grpo steps  sft-arm steps  "
             "off-path start/grpo/sft  CPU s"]
    for r in results:
        g, s, st = r["arms"]["grpo"], r["arms"]["sft"], r["start"]
        lines.append(f"{r['seed']:>4}  {st['evaluation']['solved']:>5}  {g['selected']['solved']:>4}  "
                     f"{s['selected']['solved']:>3}  {g['selected']['solved'] - s['selected']['solved']:>+3}   "
                     f"{st['sft_steps']:>4} ({st['stop']})   {g['steps']:>10}  {s['steps']:>13}  "
                     f"{st['evaluation']['off_path_accuracy']:.3f}/{g['selected']['off_path_accuracy']:.3f}/"
                     f"{s['selected']['off_path_accuracy']:.3f}        {r['cpu_s']:.0f}")
    v = summary["verdict"]
    lo, hi = v["interval90"]
    lines += [
        f"held-out solves of {total} (mean ± sd over {v['seeds']} seeds): start {summary['start_solved']['mean']:.1f} "
        f"± {summary['start_solved']['sd']:.1f}, GRPO {summary['grpo_solved']['mean']:.1f} ± "
        f"{summary['grpo_solved']['sd']:.1f}, SFT continued {summary['sft_solved']['mean']:.1f} ± "
        f"{summary['sft_solved']['sd']:.1f}",
        f"d = GRPO - SFT continued: {v['mean_d']:+.1f} ± {v['sd_d']:.1f}, 90% interval {lo:+.1f} to {hi:+.1f} "
        f"(margin ±{v['margin']:.1f}), paired t p = {v['p_value']:.3g}; seeds won GRPO {v['grpo_wins']}, "
        f"SFT {v['sft_wins']}, tied {v['ties']}",
        f"verdict (pre-registered, docs/study.md): {v['outcome']}",
    ]
    return "\n".join(lines)


def run_study(out: Path, settings: StudySettings = PROTOCOL, echo: Callable[[str], None] = print) -> dict:
    """Every seed not yet on disk, in order, then the summary (``summary.json``) of the seeds on disk."""
    import json

    for seed in settings.seeds:
        if seed_path(out, seed).is_file():
            echo(f"[study seed {seed}] on disk: {seed_path(out, seed)}")
            continue
        run_seed(seed, out, settings, echo)
    results = [json.loads(seed_path(out, s).read_text()) for s in settings.seeds]
    summary = summarise(results, settings)
    write_json_atomic(Path(out) / "summary.json", summary)
    echo(table(results, summary))
    return summary
