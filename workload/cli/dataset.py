"""``skymaze dataset``: build the SkyRL train/eval ticket files of a recipe."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import RECIPE_SETS_OPTION, fail, next_step

dataset_app = typer.Typer(
    help="SkyRL dataset tickets.\n\nExample:  skymaze dataset build --recipe blog --out data/",
    no_args_is_help=True,
)


@dataset_app.command("build")
def build(
    recipe_name: str = typer.Option("blog", "--recipe", help="Recipe name (skymaze recipe list)."),
    out: Path = typer.Option(..., "--out", help="Folder for train.parquet and eval.parquet."),
    sets: list[str] = RECIPE_SETS_OPTION,
) -> None:
    """Write train.parquet (seeded tickets, sized by the recipe) and eval.parquet (the held-out set).

    Example:  skymaze dataset build --recipe blog --out data/
    """
    import pyarrow.parquet as pq

    from workload.skyrl.recipe import load_recipe
    from workload.skyrl.tickets import build_dataset, spec_from_recipe

    recipe = load_recipe(recipe_name, sets=sets)
    spec = spec_from_recipe(recipe)
    try:
        paths = build_dataset(spec, out)
    except (OSError, ValueError) as err:
        fail(f"dataset build failed: {err}")
    for split, path in paths.items():
        typer.echo(f"{split}: {path} ({pq.read_metadata(path).num_rows} rows)")
    seeding = "seeded (one maze per GRPO group)" if spec.seeded_groups else "unseeded (published behaviour)"
    typer.echo(f"training tickets: {seeding}")
    next_step(f"skymaze recipe show {recipe_name}")


def register(app: typer.Typer) -> None:
    """Add the ``dataset`` command group."""
    app.add_typer(dataset_app, name="dataset")
