"""The Ray job the dashboard test scrapes: what the cluster trainer's driver does, small.

It runs on the local head as a Ray job (as SkyRL's entrypoint does on the cluster): tasks and an
actor (Ray Core), objects in the object store, a two-worker Ray Train run on the CPU (Ray Train) and
a Ray Data pipeline that streams batches to the driver (Ray Data), and it sets the trainer's gauges
through the trainer's own exporter (workload.skyrl.metrics) from a SkyRL-shaped log payload. Then
it holds everything alive until the test writes the release file, so every series stays exported
while Prometheus scrapes. The pipeline streams until then too, as one feeding a trainer does: Ray
Data sets its gauges only every 5 s while a dataset runs, and a pipeline over in a second left
each series a sample or two, short of the two a panel's rate() needs.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

import ray

from workload.skyrl.metrics import RayMetricsExporter, derive_metrics

RUN_ID = "dashboards-probe"
TRAIN_REPORTS = 3
POLL_S = 0.2
# The Ray Data pipeline: one block a batch, one batch taken every BATCH_PAUSE_S, so it outlasts the test's
# wait for its series (2 minutes at most) by far; it stops once released.
BATCH_ROWS = 10
STREAM_BATCHES = 600  # 600 x 0.5 s = 5 min of streaming at the least
BATCH_PAUSE_S = 0.5
# A SkyRL 0.4.0 log payload of one step with an evaluation (keys: workload/skyrl/metrics.py).
SKYRL_LOGS = {
    "trainer/global_step": 10, "reward/avg_raw_reward": 0.6, "timing/generate": 4.0, "eval/all/pass_at_1": 0.5,
    "eval/all/environment/solved_sum": 30, "eval/all/environment/episodes": 64,
    "environment/solved_sum": 40, "environment/episodes": 64,
}


@ray.remote
def square(x: int) -> int:
    return x * x


@ray.remote
class Trainer:
    """Where SkyRL's trainer sets its gauges (an actor of the job)."""

    def __init__(self) -> None:
        # The test head reports every 1 s (tests/workload/skyrl/ray_head.py): set again twice as often.
        self.exporter = RayMetricsExporter(run_id=RUN_ID, keepalive_s=0.5)

    def log(self, logs: dict) -> list[str]:
        return self.exporter.export(derive_metrics(logs, strict_metric=True, trajectories_per_step=64))


def train_loop(config: dict) -> None:
    import ray.train

    for step in range(TRAIN_REPORTS):
        ray.train.report({"step": step})


def run_train(storage: Path) -> None:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer  # Ray Train V2, Ray 2.60's default

    DataParallelTrainer(train_loop, scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
                        run_config=RunConfig(name="probe", storage_path=str(storage))).fit()


def stream_until_released(release: Path, on_first_batch: Callable[[], object]) -> None:
    """Take the pipeline's batches, one a pause, until ``release`` exists (or the data ends)."""
    dataset = ray.data.range(STREAM_BATCHES * BATCH_ROWS, override_num_blocks=STREAM_BATCHES).map_batches(
        lambda batch: {"id": batch["id"] * 2})
    for taken, batch in enumerate(dataset.iter_batches(batch_size=BATCH_ROWS), start=1):
        assert len(batch["id"]) == BATCH_ROWS and not (batch["id"] % 2).any(), batch
        if taken == 1:
            on_first_batch()
        if release.exists():
            return
        time.sleep(BATCH_PAUSE_S)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--release-file", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args()
    ray.init()
    assert ray.get([square.remote(i) for i in range(20)]) == [i * i for i in range(20)]
    held = [ray.put(b"x" * 1_000_000) for _ in range(4)]  # object store memory in use
    trainer = Trainer.remote()
    published = ray.get(trainer.log.remote(SKYRL_LOGS))
    run_train(args.ready_file.parent / "train")
    stream_until_released(args.release_file, lambda: args.ready_file.write_text(",".join(published)))
    while not args.release_file.exists():
        time.sleep(POLL_S)
    del held


if __name__ == "__main__":
    main()
