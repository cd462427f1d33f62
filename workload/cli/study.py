"""`skymaze study`: the pre-registered GRPO-vs-SFT-continued study on the CPU task (docs/study.md)."""

from __future__ import annotations

from pathlib import Path

import typer

from workload.cli._common import EXIT_USAGE, doc_help, fail, next_step
from workload.cli.rehearse import _quiet_library_noise
from workload.errors import UsageError


def parse_seeds(text: str) -> tuple[int, ...]:
    """``0-5`` or ``0,2,4`` (or a mix) -> the seeds in order, each once; a UsageError (exit 2) says what is wrong."""
    seeds: list[int] = []
    for part in (p.strip() for p in text.split(",")):
        low, dash, high = part.partition("-")
        if not low.isdecimal() or (dash and not high.isdecimal()):
            raise UsageError(f"--seeds {text!r}: {part!r} is not a seed (N) or a range (N-M) of non-negative "
                             "integers; write e.g. --seeds 0-5 or --seeds 0,3")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise UsageError(f"--seeds {text!r}: the range {part!r} runs backwards; write it low-high, e.g. 0-5")
        seeds += [s for s in range(first, last + 1) if s not in seeds]
    return tuple(seeds)


def study(
    seeds: str = typer.Option("0-5", "--seeds", help="Seeds to run: a range N-M or a list N,M (the protocol: 0-5)."),
    out: Path = typer.Option(Path("runs/study"), "--out", help="Folder of the per-seed results and summary.json."),
) -> None:
    """Run the pre-registered study (docs/study.md): per seed, SFT of the tiny Qwen3-VL on path-only solver
    demonstrations to a validation plateau, then from that start GRPO and SFT continued with the same LoRA,
    weight average and training CPU seconds, each reported at its validation-selected evaluation on mazes
    held out by whole rotation/reflection classes. Prints the per-seed table, each arm's mean ± sd, the paired
    t-test over seeds and the pre-registered verdict; writes OUT/seed-N.json (one per seed, atomically, when
    the seed finishes) and OUT/summary.json. Finished seeds are read back, so the same command after a kill
    continues with the next seed. 291-399 CPU seconds a seed on the project's machine (docs/study.md).

    Exit codes: 0 done, 1 a seed failed, 2 bad options.

    Example:  skymaze study --seeds 0-5 --out runs/study
    """
    _quiet_library_noise()
    import dataclasses

    from workload.local import study as protocol

    chosen = parse_seeds(seeds)
    if len(chosen) < 2:
        fail(f"--seeds {seeds!r}: the verdict is a paired test over seeds and needs at least 2; the protocol runs "
             "0-5", code=EXIT_USAGE)
    settings = dataclasses.replace(protocol.PROTOCOL, seeds=chosen)
    try:
        protocol.run_study(out, settings, echo=typer.echo)
    except (OSError, RuntimeError, ValueError) as error:
        fail(f"study failed: {error}")
    next_step(f"python -m json.tool {out / 'summary.json'}", "make rehearse")


def register(app: typer.Typer) -> None:
    app.command("study", help=doc_help(study.__doc__))(study)
