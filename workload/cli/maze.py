"""``skymaze maze``: draw a maze, show the held-out sets, regenerate a frozen set."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import EXIT_USAGE, JSON_OPTION, fail, next_step, print_json
from workload.maze.render import DEFAULT_CELL_PX

maze_app = typer.Typer(
    help="The VisGym maze: pictures, frozen held-out sets.\n\n"
         "Example:  skymaze maze show --seed 0 --size 9 -o maze.png",
    no_args_is_help=True,
)


@maze_app.command("show")
def show(
    seed: int = typer.Option(0, help="maze seed (VisGym's seeding path)"),
    size: int = typer.Option(9, help="odd maze size >= 5: 9 = easy, 11 = hard"),
    output: Path = typer.Option(Path("maze.png"), "-o", "--output", help="PNG to write"),
    cell_px: int = typer.Option(DEFAULT_CELL_PX, help="pixels a cell (VisGym: 25)"),
    strip: Path | None = typer.Option(None, help="also write the solver's episode strip to this PNG"),
) -> None:
    """Draw a maze's first frame as a PNG and print its map and shortest path.

    Example:  skymaze maze show --seed 0 --size 9 -o maze.png
    """
    from workload.maze import Maze2D
    from workload.maze.pictures import episode_strip, maze_picture
    from workload.maze.solver import solve

    if seed < 0:
        fail(f"--seed must be >= 0, got {seed}", code=EXIT_USAGE)
    try:
        env = Maze2D(size, cell_px=cell_px)
    except ValueError as error:
        fail(f"{error} (--size / --cell-px)", code=EXIT_USAGE)
    env.reset(seed=seed)
    state, ansi = env.get_init_state(), env.render("ansi")
    actions = solve(state)
    try:
        maze_picture(state, cell_px).save(output)
        if strip is not None:
            frames = [env.render()] + [env.step(action)[0] for action in actions]
            episode_strip(frames, actions).save(strip)
    except OSError as error:
        fail(f"cannot write the picture: {error}")
    typer.echo(ansi)
    typer.echo(
        f"seed {seed}, {size}x{size}: agent {state['agent_location']}, target {state['target_location']}"
    )
    typer.echo(f"shortest path: {len(actions) - 1} moves + stop = {len(actions)} turns")
    typer.echo(f"wrote {output}" + (f" and {strip}" if strip else ""))
    next_step("skymaze maze heldout --heldout easy-64")


@maze_app.command("heldout")
def heldout(
    set_name: str | None = typer.Option(None, "--heldout", help="one held-out set (default: every set)"),
    mazes: bool = typer.Option(False, "--mazes", help="also list every maze: seed, corners, path length"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the frozen held-out sets: shortest paths and the solvable ceiling at 15 and 20 turns.

    Example:  skymaze maze heldout --heldout easy-64
    """
    from workload.evaluate.report import heldout_markdown
    from workload.maze.heldout import SPECS, load_set

    names = sorted(SPECS) if set_name is None else [set_name]
    if set_name is not None and set_name not in SPECS:
        fail(f"unknown set {set_name!r}; known sets: {', '.join(sorted(SPECS))}", code=EXIT_USAGE)
    sets = [load_set(name) for name in names]  # a damaged or missing set exits 1
    if as_json:
        print_json([{"name": held.name, "size": held.size, "mazes": [
            {"seed": e["seed"], "agent": e["init_state"]["agent_location"],
             "target": e["init_state"]["target_location"], "shortest_path_len": e["shortest_path_len"]}
            for e in held.entries]} for held in sets])
        return
    typer.echo(heldout_markdown(sets))
    if mazes:
        for held in sets:
            typer.echo(f"\n{held.name}: seed  agent -> target  moves")
            for entry in held.entries:
                state = entry["init_state"]
                typer.echo(
                    f"  {entry['seed']:5d}  {state['agent_location']} -> {state['target_location']}  "
                    f"{entry['shortest_path_len']}"
                )
    next_step(f"skymaze maze show --seed 0 --size {sets[0].size} -o maze.png")


@maze_app.command("freeze")
def freeze(
    set_name: str = typer.Option(..., "--heldout", help="the held-out set to regenerate"),
    directory: Path | None = typer.Option(
        None, "--dir", help="folder to write to (default: the package's sets)"
    ),
) -> None:
    """Regenerate a frozen held-out set and its manifest hash (atomic writes).

    Only needed after deliberately changing a set: scores on a changed set are not comparable.

    Example:  skymaze maze freeze --heldout rehearsal-7x7-64 --dir /tmp/heldout
    """
    import hashlib

    from workload.maze.heldout import HELDOUT_DIR, SPECS, freeze_set

    if set_name not in SPECS:
        fail(f"unknown set {set_name!r}; known sets: {', '.join(sorted(SPECS))}", code=EXIT_USAGE)
    target = directory or HELDOUT_DIR
    old = target / f"{set_name}.json"
    before = hashlib.sha256(old.read_bytes()).hexdigest() if old.exists() else None
    path = freeze_set(set_name, target)
    after = hashlib.sha256(path.read_bytes()).hexdigest()
    typer.echo(f"wrote {path} (sha256 {after})")
    if before is None:
        typer.echo("new set file")
    else:
        typer.echo(
            "unchanged" if before == after else f"CHANGED (was {before}): scores on it are not comparable"
        )
    next_step(f"skymaze maze heldout --heldout {set_name}")


def register(app: typer.Typer) -> None:
    """Add the ``maze`` command group to ``skymaze``."""
    app.add_typer(maze_app, name="maze")
