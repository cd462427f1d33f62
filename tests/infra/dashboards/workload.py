"""The Ray job the dashboard test scrapes: what the cluster trainer's driver does, small.

It runs on the local head as a Ray job (as SkyRL's entrypoint does on the cluster): tasks and an
actor (Ray Core), objects in the object store, a small Ray Data pipeline and a two-worker Ray Train
run on the CPU (Ray Data, Ray Train), and it sets the trainer's gauges through the trainer's own
exporter (workload.skyrl.metrics) from a SkyRL-shaped log payload. Then it holds everything alive
until the test writes the release file, so every series stays exported while Prometheus scrapes.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import ray

from workload.skyrl.metrics import RayMetricsExporter, derive_metrics

RUN_ID = "dashboards-probe"
TRAIN_REPORTS = 3
DATA_ROWS = 2_000
POLL_S = 0.2
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
    rows = ray.data.range(DATA_ROWS).map_batches(lambda batch: {"id": batch["id"] * 2}).take_all()
    assert len(rows) == DATA_ROWS
    run_train(args.ready_file.parent / "train")
    args.ready_file.write_text(",".join(published))
    while not args.release_file.exists():
        time.sleep(POLL_S)
    del held


if __name__ == "__main__":
    main()
