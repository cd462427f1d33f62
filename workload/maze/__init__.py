"""VisGym-faithful maze_2d: generator, rules, renderer, solver, prompts, frozen held-out sets."""
