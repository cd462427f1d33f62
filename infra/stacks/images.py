"""Images: the trainer and serving container images, built and pushed by `cdk deploy`."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import IgnoreMode, Stack
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from workload.deployment.names import IMAGE_PARAMETER
from workload.deployment.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_DIR = ROOT / "containers"
# Build for the cluster's nodes whatever machine runs `cdk deploy`.
PLATFORM = ecr_assets.Platform.LINUX_AMD64


def dockerignore(path: Path) -> list[str]:
    """The patterns of a .dockerignore file (comments and blank lines dropped)."""
    lines = (line.strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


class ImagesStack(Stack):
    """Docker image assets plus SSM parameters naming them (so the stack has resources to deploy)."""

    def __init__(self, scope: Construct, construct_id: str, *, settings: Settings, **kwargs) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.trainer = self._image("Trainer", "trainer", settings)
        self.serve = self._image("Serve", "serve", settings)

    def _image(self, construct_id: str, folder: str, settings: Settings) -> ecr_assets.DockerImageAsset:
        # Context = repository root (the image installs workload/), filtered by the folder's
        # .dockerignore allow-list so the asset holds, and hashes, only what the image copies.
        image = ecr_assets.DockerImageAsset(
            self, construct_id, directory=str(ROOT), file=f"containers/{folder}/Dockerfile", platform=PLATFORM,
            exclude=dockerignore(CONTAINERS_DIR / folder / ".dockerignore"), ignore_mode=IgnoreMode.DOCKER,
        )
        ssm.StringParameter(
            self, f"{construct_id}Uri", parameter_name=IMAGE_PARAMETER.format(app=settings.name, image=folder),
            string_value=image.image_uri, description=f"{folder} image built from containers/{folder}",
        )
        return image
