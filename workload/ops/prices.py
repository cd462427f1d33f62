"""The dated price table (``prices.yaml``) read once into frozen, validated objects.

Every price keeps its source and its basis (``list``: a published on-demand list price;
``estimate``: derived, the row says how), so a cost report can say which of its lines rest on
estimates.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, ValidationError, model_validator

DEFAULT_PRICES_PATH = Path(__file__).with_name("prices.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Price(_Frozen):
    """One unit price with where it came from."""

    usd: float = Field(ge=0)
    basis: Literal["list", "estimate"]
    source: str = Field(min_length=8)
    derivation: str | None = None

    @model_validator(mode="after")
    def _estimates_explain_themselves(self) -> Price:
        if self.basis == "estimate" and not self.derivation:
            raise ValueError("an `estimate` price needs a `derivation` saying how the figure was obtained")
        return self


class InstancePrice(_Frozen):
    """Hourly price of one SageMaker HyperPod instance type."""

    usd_per_hour: float = Field(gt=0)
    basis: Literal["list", "estimate"]
    source: str = Field(min_length=8)
    derivation: str | None = None

    @model_validator(mode="after")
    def _estimates_explain_themselves(self) -> InstancePrice:
        self.as_price()  # the same rule as Price: an estimate needs its derivation
        return self

    def as_price(self) -> Price:
        return Price(usd=self.usd_per_hour, basis=self.basis, source=self.source, derivation=self.derivation)


class NatPrices(_Frozen):
    usd_per_hour: Price
    usd_per_gb_processed: Price


class GrafanaPrices(_Frozen):
    editor: Price
    viewer: Price


class PrometheusPrices(_Frozen):
    usd_per_10m_samples_ingested: Price
    usd_per_gib_month_stored: Price
    usd_per_billion_query_samples: Price


class SupportCalendar(_Frozen):
    """The last day of EKS standard support of each Kubernetes version; extended support follows."""

    source: str = Field(min_length=8)
    ends: dict[str, datetime.date]


class PriceTable(_Frozen):
    """The whole ``prices.yaml``; see that file for units and sources."""

    as_of: datetime.date
    region: str
    currency: Literal["USD"]
    hours_per_month: PositiveFloat
    instances: dict[str, InstancePrice]
    eks_cluster_usd_per_hour: Price
    eks_cluster_extended_support_usd_per_hour: Price
    eks_standard_support: SupportCalendar
    ebs_gp3_usd_per_gib_month: Price
    fsx_lustre_usd_per_gib_month: dict[str, Price]
    grafana_usd_per_user_month: GrafanaPrices
    nat_gateway: NatPrices
    public_ipv4_usd_per_hour: Price
    interface_endpoint_usd_per_az_hour: Price
    prometheus: PrometheusPrices
    s3_standard_usd_per_gib_month: Price

    def instance(self, instance_type: str) -> Price:
        """The hourly price of ``instance_type``; a missing type is a clear error naming the file."""
        if instance_type not in self.instances:
            known = ", ".join(sorted(self.instances))
            raise KeyError(
                f"no price for instance type {instance_type!r} in the price table (known: {known}); "
                "add it under `instances:` with its source, or pass --prices FILE"
            )
        return self.instances[instance_type].as_price()

    def eks_cluster(self, kubernetes_version: str, on: datetime.date) -> tuple[Price, str]:
        """The control plane's hourly price for ``kubernetes_version`` on day ``on``, and which support it is in
        (EKS bills extended support from the day after standard support ends)."""
        ends = self.eks_standard_support.ends
        if kubernetes_version not in ends:
            raise KeyError(f"no EKS support dates for Kubernetes {kubernetes_version} in the price table (known: "
                           f"{', '.join(sorted(ends))}); add its end of standard support under "
                           f"`eks_standard_support.ends` from {self.eks_standard_support.source}, "
                           "or pass --prices FILE")
        if on > ends[kubernetes_version]:
            return self.eks_cluster_extended_support_usd_per_hour, "extended support"
        return self.eks_cluster_usd_per_hour, "standard support"

    def fsx(self, tier: str) -> Price:
        """Price per GiB-month of an FSx for Lustre tier key such as ``PERSISTENT_2_125``."""
        if tier not in self.fsx_lustre_usd_per_gib_month:
            known = ", ".join(sorted(self.fsx_lustre_usd_per_gib_month))
            raise KeyError(f"no FSx for Lustre price for tier {tier!r} (known: {known})")
        return self.fsx_lustre_usd_per_gib_month[tier]


def load_prices(path: Path = DEFAULT_PRICES_PATH) -> PriceTable:
    """Read and validate a price table; a bad file raises ``ValueError`` naming the file and the key."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError as exc:
        raise ValueError(f"price table {path} does not exist; pass --prices with an existing file") from exc
    except yaml.YAMLError as exc:
        raise ValueError(f"price table {path} is not valid YAML: {exc}") from exc
    if not isinstance(document, dict):
        raise ValueError(f"price table {path} must be a YAML mapping, got {type(document).__name__}")
    try:
        return PriceTable.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"price table {path}: key `{key}`: {first['msg']}") from exc
