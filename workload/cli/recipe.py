"""``skymaze recipe``: show and check the SkyRL training recipes."""

from __future__ import annotations

import typer

from workload.cli._common import EXIT_USAGE, JSON_OPTION, fail, next_step, print_json

recipe_app = typer.Typer(
    help="Training recipes: the exact SkyRL overrides a cluster job runs with.\n\nExample:  skymaze recipe show blog",
    no_args_is_help=True,
)

SET_HELP = "Change one setting: a SkyRL key (trainer.eval_interval=5) or a recipe field (fixes.seeded_groups=false)."


def load_or_exit(name: str, sets: list[str] | None):
    """Load a recipe, turning a bad name or malformed ``--set`` into exit code 2."""
    from workload.skyrl.recipe import load_recipe

    try:
        return load_recipe(name, sets=sets)
    except ValueError as err:
        fail(str(err), code=EXIT_USAGE)


def problems_of(recipe) -> list[str]:
    """Validation problems of a recipe, one line each (empty when it is sound)."""
    from pydantic import ValidationError

    from workload.skyrl.validate import validate_recipe

    try:
        validate_recipe(recipe)
    except ValidationError as err:
        return [line for e in err.errors() for line in str(e["ctx"]["error"]).splitlines()]
    return []


@recipe_app.command("list")
def list_recipes(as_json: bool = JSON_OPTION) -> None:
    """List the shipped recipes.

    Example:  skymaze recipe list
    """
    from workload.skyrl.recipe import available_recipes, load_recipe

    if as_json:
        print_json([{"name": name, "description": load_recipe(name).description} for name in available_recipes()])
        return

    for name in available_recipes():
        typer.echo(f"{name:<14} {load_recipe(name).description}")
    next_step("skymaze recipe show blog")


@recipe_app.command("show")
def show(
    name: str = typer.Argument("blog", help="Recipe name (skymaze recipe list)."),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
) -> None:
    """Print the resolved SkyRL overrides, one key=value a line, exactly as passed to SkyRL.

    Stdout holds only the overrides, e.g. for `python -m skyrl.train.entrypoints.main_base $(skymaze recipe show blog)`.

    Example:  skymaze recipe show blog --set trainer.eval_interval=5
    """
    recipe = load_or_exit(name, sets)
    for line in recipe.overrides():
        typer.echo(line)
    # stdout stays exactly the overrides (usable as argv); the hint goes to stderr.
    typer.echo(f"\nNext:\n  skymaze recipe check {name}", err=True)


@recipe_app.command("check")
def check(
    name: str = typer.Argument("blog", help="Recipe name (skymaze recipe list)."),
    sets: list[str] = typer.Option(None, "--set", help=SET_HELP),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a recipe against the rules that make SkyRL fail late on the cluster.

    Exit 0 when sound, 1 with one line per problem (the key, what is wrong, the fix).

    Example:  skymaze recipe check blog
    """
    recipe = load_or_exit(name, sets)
    problems = problems_of(recipe)
    if as_json:
        print_json({"recipe": name, "run_id": recipe.run_id, "ok": not problems, "problems": problems,
                    "overrides": len(recipe.overrides()), "fixes": recipe.fixes.model_dump()})
        if problems:
            raise typer.Exit(code=1)
        return
    if problems:
        for line in problems:
            typer.echo(f"error: {line}", err=True)
        fail(f"recipe {name!r}: {len(problems)} problem(s)")
    fixes = ", ".join(f"{k}={'on' if v else 'off'}" for k, v in recipe.fixes.model_dump().items())
    typer.echo(f"recipe {name!r}: ok ({len(recipe.overrides())} overrides; fixes: {fixes})")
    next_step(f"skymaze plan --recipe {name}", f"skymaze submit --recipe {name}")


def register(app: typer.Typer) -> None:
    """Add the ``recipe`` command group."""
    app.add_typer(recipe_app, name="recipe")
