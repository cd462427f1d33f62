"""Whether a training recipe can run on a deployment profile's GPU workers. Pure."""

from __future__ import annotations


def recipe_profile_problems(recipe, settings) -> list[str]:
    """One line per way ``recipe`` exceeds ``settings``.

    ``recipe`` is a workload.skyrl.recipe.Recipe, ``settings`` a workload.deployment.settings.Settings.

    The recipe's ``cluster`` block says how many GPU workers and GPUs each it was written for;
    the profile deploys ``trainer_worker_count`` workers of ``worker_instance_type``.
    """
    workers = settings.trainer_worker_count
    gpus = settings.worker_spec.gpus
    where = f"profile {settings.profile!r} deploys {workers} x {settings.worker_instance_type} ({gpus} GPUs each)"
    problems = []
    if recipe.cluster.nodes > workers:
        problems.append(
            f"recipe {recipe.name!r} needs {recipe.cluster.nodes} GPU workers (cluster.nodes) but {where}. "
            f"Fix: deploy with -c worker_count={recipe.cluster.nodes}, choose --size blog, or use a recipe "
            f"written for {workers} worker(s) (--set cluster.nodes={workers} with a matching placement).")
    if recipe.cluster.gpus_per_node > gpus:
        problems.append(
            f"recipe {recipe.name!r} needs {recipe.cluster.gpus_per_node} GPUs per worker (cluster.gpus_per_node) "
            f"but {where}. Fix: choose a worker_instance_type with {recipe.cluster.gpus_per_node} GPUs.")
    return problems
