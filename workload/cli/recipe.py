"""``skymaze recipe``: list, show and check the cluster (SkyRL) and rehearsal recipes."""

from __future__ import annotations

import typer

from workload.cli._common import (
    DEPLOY_SETS_OPTION,
    EXIT_USAGE,
    JSON_OPTION,
    PROFILE_OPTION,
    RECIPE_SET_HELP,
    RECIPE_SETS_OPTION,
    doc_help,
    fail,
    flags,
    next_step,
    print_json,
    recipe_for_profile,
    resolve_size,
)

recipe_app = typer.Typer(
    help=("Recipes: cluster recipes (the exact SkyRL overrides a HyperPod job runs with) and rehearsal recipes "
          "(skymaze rehearse).\n\nExample:  skymaze recipe show blog"),
    no_args_is_help=True,
)

# Kept for the commands that import it: the one help text of `--set`.
SET_HELP = RECIPE_SET_HELP
NAME_HELP = "Recipe name (skymaze recipe list): a cluster recipe (blog) or a rehearsal recipe (local)."


def kind_of(name: str) -> str:
    """``cluster`` or ``rehearsal``: which folder holds recipe ``name`` (exit 2 when neither does)."""
    from workload.local.config import available_recipes as rehearsal_recipes
    from workload.skyrl.recipe import available_recipes as cluster_recipes

    if name in cluster_recipes():
        return "cluster"
    if name in rehearsal_recipes():
        return "rehearsal"
    known = ", ".join((*cluster_recipes(), *rehearsal_recipes()))
    fail(f"unknown recipe {name!r}: choose one of {known} (skymaze recipe list)", code=EXIT_USAGE)


def problems_of(recipe, profile: str | None = None, deploy_sets: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Validation problems of a cluster recipe, one line each (empty when it is sound).

    With a deploy ``profile``, the LoRA rank is checked against the cluster endpoint's ``max_lora_rank``
    (DEFAULT_MAX_LORA_RANK); its ``-c`` pairs are checked by :func:`profile_fit_problems`.
    """
    from pydantic import ValidationError

    from workload.serving_rules import DEFAULT_MAX_LORA_RANK
    from workload.skyrl.validate import validate_recipe

    max_rank = DEFAULT_MAX_LORA_RANK if profile else None
    try:
        validate_recipe(recipe, max_lora_rank=max_rank)
    except ValidationError as err:
        return [line for e in err.errors() for line in str(e["ctx"]["error"]).splitlines()]
    return []


def profile_fit_problems(recipe, profile: str, context: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Why ``recipe`` cannot run on deploy ``profile`` (with ``-c`` ``context``): more GPU workers than deployed.

    A bad profile or setting raises ``SettingsError`` (exit 2).
    """
    from workload.ops.profiles import parse_overrides, settings_for
    from workload.ops.recipe_fit import recipe_profile_problems

    return list(recipe_profile_problems(recipe, settings_for(profile, parse_overrides(list(context)))))


def list_recipes(as_json: bool = JSON_OPTION) -> None:
    """List the shipped recipes: cluster recipes (skymaze submit) and rehearsal recipes (skymaze rehearse).

    A recipe that cannot be read is listed with its error on stderr, and the command exits 1.

    Example:  skymaze recipe list
    """
    from workload.local.config import available_recipes as rehearsal_recipes
    from workload.local.config import load_config
    from workload.skyrl.recipe import available_recipes, load_recipe

    rows = []
    for kind, names, load in (("cluster", available_recipes(), load_recipe),
                              ("rehearsal", rehearsal_recipes(), load_config)):
        for name in names:
            try:
                rows.append({"name": name, "kind": kind, "description": load(name).description, "error": None})
            except ValueError as err:
                rows.append({"name": name, "kind": kind, "description": None, "error": str(err)})
    broken = [row for row in rows if row["error"]]
    if as_json:
        print_json(rows)
    else:
        for row in rows:
            typer.echo(f"{row['name']:<14} {row['kind']:<10} {row['description'] or '(cannot be read)'}")
    for row in broken:
        typer.echo(f"error: {row['error']}", err=True)
    if broken:
        raise typer.Exit(code=1)
    if not as_json:
        next_step("skymaze recipe show blog", "skymaze recipe show local --fields")


recipe_app.command("list", help=doc_help(list_recipes.__doc__))(list_recipes)


def show(
    name: str = typer.Argument("blog", help=NAME_HELP),
    sets: list[str] = RECIPE_SETS_OPTION,
    fields: bool = typer.Option(False, "--fields", help="Print every setting of the recipe's kind: default, meaning."),
) -> None:
    """Print the resolved recipe, one KEY=VALUE a line.

    A cluster recipe prints exactly the overrides SkyRL receives, e.g. for
    `python -m skyrl.train.entrypoints.main_base $(skymaze recipe show blog)`; a rehearsal recipe prints
    every setting, each of which `skymaze rehearse --set KEY=VALUE` changes. With --fields: the table
    of settings with their defaults and meanings.

    Example:  skymaze recipe show blog --set trainer.eval_interval=5
    """
    kind = kind_of(name)
    if fields:
        from workload import config

        model, defaults = _model_of(kind, name)
        for line in config.settings_table(model, defaults):
            typer.echo(line)
        return
    size = ""
    if kind == "cluster":
        from workload.cli._common import load_run

        # What submit sends: changed settings get their own run name (trainer.run_name and every path), as there.
        recipe = load_run(name, list(sets or []))
        lines = recipe.overrides()
        size = _size_that_fits(recipe)
    else:
        from workload.local.config import load_config

        lines = load_config(name, list(sets or [])).overrides()
    for line in lines:
        typer.echo(line)
    # stdout stays exactly the settings (usable as argv); the hint goes to stderr.
    typer.echo(f"\nNext:\n  skymaze recipe check {name}{size}{flags('--set', sets)}", err=True)


recipe_app.command("show", help=doc_help(show.__doc__))(show)


def _size_that_fits(recipe) -> str:
    """`` --size NAME`` of the recipe's own size, else the smallest deploy size it fits (check's default size
    is the recorded one, else small, which a 3-node recipe does not fit); empty when none does."""
    from workload.ops.profiles import PROFILES

    sizes = [recipe.name] if recipe.name in PROFILES else []
    for size in (*sizes, *sorted(PROFILES, key=lambda p: PROFILES[p].get("worker_count", 0))):
        if not profile_fit_problems(recipe, size):
            return f" --size {size}"
    return ""


def check(
    name: str | None = typer.Argument(None, help=NAME_HELP + " Default: the one named like the size."),
    sets: list[str] = RECIPE_SETS_OPTION,
    profile: str | None = PROFILE_OPTION,
    context: list[str] = DEPLOY_SETS_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a recipe: a cluster recipe against the rules that make SkyRL fail late on the cluster
    (the LoRA rank against the deploy profile's endpoint, its GPU workers against the profile's), a
    rehearsal recipe against its own rules.

    Exit 0 when sound, 1 with one line per problem (the key, what is wrong, the fix), 2 bad input.

    Example:  skymaze recipe check blog --size blog
    """
    given_c = list(context)
    profile, context = resolve_size(profile, given_c)
    name = recipe_for_profile(name, profile)
    if kind_of(name) == "rehearsal":
        from workload.local.config import load_config

        cfg = load_config(name, list(sets or []))
        if as_json:
            print_json({"recipe": name, "kind": "rehearsal", "run_id": cfg.run_id, "ok": True, "problems": []})
            return
        typer.echo(f"recipe {name!r}: ok (rehearsal; run {cfg.run_id})")
        next_step(f"skymaze rehearse --recipe {name}{flags('--set', sets)}")
        return
    from workload.cli._common import load_run

    recipe = load_run(name, list(sets or []))
    problems = problems_of(recipe, profile, context) + profile_fit_problems(recipe, profile, context)
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
    kept = f"{flags('--set', sets)}{flags('-c', given_c)}"
    next_step(f"skymaze plan --recipe {name} --size {profile}{kept}",
              f"skymaze submit --recipe {name} --size {profile}{kept}")


recipe_app.command("check", help=doc_help(check.__doc__))(check)


def _model_of(kind: str, name: str):
    """(settings model, the recipe's values) of a recipe kind, for the --fields table."""
    from workload import config

    if kind == "cluster":
        from workload.skyrl.recipe import RECIPES_DIR, Recipe

        return Recipe, config.read_recipe(RECIPES_DIR, name)
    from workload.local.config import RECIPES_DIR, RehearsalConfig

    return RehearsalConfig, config.read_recipe(RECIPES_DIR, name)


def register(app: typer.Typer) -> None:
    """Add the ``recipe`` command group."""
    app.add_typer(recipe_app, name="recipe")
