"""Cost model: what a deployed profile costs per hour and per run, from the dated price table.

Pure functions on frozen inputs: ``ClusterShape`` (what the profile deploys), ``Usage``
(assumptions about traffic and metrics that no setting fixes) and ``PriceTable``. The CLI
builds the shape from the deployment settings; tests build it directly.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field

from workload.deployment.names import HYPERPOD_GPU_GROUP
from workload.deployment.settings import KUBERNETES_VERSION
from workload.ops.prices import Price, PriceTable

# Amazon Managed Prometheus bills ingestion per 10 million samples (AMP pricing page).
AMP_SAMPLES_PER_UNIT = 10_000_000
SECONDS_PER_HOUR = 3600


@dataclass(frozen=True)
class InstanceGroup:
    """One HyperPod instance group: ``count`` nodes of ``instance_type``, each with an EBS volume."""

    name: str
    instance_type: str
    count: int
    ebs_gib: int = 0


@dataclass(frozen=True)
class ClusterShape:
    """The billable pieces a profile deploys."""

    profile: str
    instance_groups: tuple[InstanceGroup, ...]
    fsx_tier: str                      # a key of `fsx_lustre_usd_per_gib_month`, e.g. PERSISTENT_2_125
    fsx_gib: int
    nat_gateways: int = 1              # gateways the deployment creates (0 in an existing VPC)
    nat_traffic: bool = True           # the run's downloads pass a NAT gateway (its own or the VPC's)
    eks_clusters: int = 1              # control planes the deployment creates (0 on an existing cluster)
    kubernetes_version: str = KUBERNETES_VERSION  # its support period on the day sets the control plane's rate
    interface_endpoints: int = 0       # endpoint x AZ pairs
    grafana_editors: int = 1           # a workspace needs at least one editor licence
    grafana_viewers: int = 0


@dataclass(frozen=True)
class Usage:
    """Assumptions about a run that no deployment setting fixes; every one is a CLI option.

    NAT: the private subnets reach ECR and Hugging Face through the NAT gateway (only S3 has a
    gateway endpoint): about 4 nodes x 20 GB trainer image + 2 x 15 GB serving image + 17 GB base
    model. Prometheus: about 1k series a node (node exporter), 200 a GPU (DCGM), 5k from
    kube-state-metrics and 10-20k from Ray on 4 nodes, scraped every 30 s by the add-on.
    """

    nat_gb_per_run: float = 130.0
    amp_active_series: int = 30_000
    amp_scrape_interval_s: int = 30
    artifacts_gib: float = 50.0        # checkpoints + adapters kept in S3 for the month


@dataclass(frozen=True)
class CostLine:
    """One row of a cost report: an hourly part, a one-off part, and whether it rests on an estimate."""

    item: str
    quantity: str
    usd_per_hour: float
    usd_one_off: float
    estimate: bool

    def per_run(self, hours: float) -> float:
        return self.usd_per_hour * hours + self.usd_one_off


@dataclass(frozen=True)
class CostReport:
    """All lines for ``hours`` of a deployed profile; totals are sums of the lines."""

    profile: str
    hours: float
    prices_as_of: str
    region: str
    lines: tuple[CostLine, ...] = field(default_factory=tuple)

    @property
    def usd_per_hour(self) -> float:
        return sum(line.usd_per_hour for line in self.lines)

    @property
    def usd_per_run(self) -> float:
        return sum(line.per_run(self.hours) for line in self.lines)

    @property
    def has_estimates(self) -> bool:
        return any(line.estimate for line in self.lines)


def _hourly(item: str, quantity: str, price: Price, units: float) -> CostLine:
    return CostLine(item, quantity, price.usd * units, 0.0, price.basis == "estimate")


def _compute_lines(shape: ClusterShape, prices: PriceTable, on: datetime.date) -> list[CostLine]:
    lines = []
    for group in shape.instance_groups:
        price = prices.instance(group.instance_type)
        lines.append(
            _hourly(f"HyperPod {group.instance_type} ({group.name})",
                    f"{group.count} x ${price.usd:.2f}/h", price, group.count)
        )
    ebs_gib = sum(group.count * group.ebs_gib for group in shape.instance_groups)
    if ebs_gib:
        ebs = prices.ebs_gp3_usd_per_gib_month
        lines.append(_hourly("EBS gp3 (node volumes)", f"{ebs_gib} GiB", ebs, ebs_gib / prices.hours_per_month))
    if shape.eks_clusters:
        price, support = prices.eks_cluster(shape.kubernetes_version, on)
        lines.append(_hourly(f"EKS control plane ({shape.kubernetes_version})",
                             f"{shape.eks_clusters} cluster, {support}", price, shape.eks_clusters))
    return lines


def _storage_and_network_lines(shape: ClusterShape, usage: Usage, prices: PriceTable) -> list[CostLine]:
    per_month = 1 / prices.hours_per_month
    fsx = prices.fsx(shape.fsx_tier)
    lines = [_hourly(f"FSx for Lustre {shape.fsx_tier}", f"{shape.fsx_gib} GiB", fsx, shape.fsx_gib * per_month)]
    nat = prices.nat_gateway
    if shape.nat_gateways:
        lines.append(_hourly("NAT gateway", f"{shape.nat_gateways} gateway", nat.usd_per_hour, shape.nat_gateways))
        lines.append(_hourly("NAT public IPv4", f"{shape.nat_gateways} address", prices.public_ipv4_usd_per_hour,
                             shape.nat_gateways))
    if shape.nat_traffic:
        through = "" if shape.nat_gateways else " (the VPC's own NAT)"
        lines.append(CostLine("NAT data processed", f"{usage.nat_gb_per_run:g} GB a run{through}", 0.0,
                              usage.nat_gb_per_run * nat.usd_per_gb_processed.usd,
                              nat.usd_per_gb_processed.basis == "estimate"))
    if shape.interface_endpoints:
        lines.append(_hourly("VPC interface endpoints", f"{shape.interface_endpoints} endpoint-AZs",
                             prices.interface_endpoint_usd_per_az_hour, shape.interface_endpoints))
    s3 = prices.s3_standard_usd_per_gib_month
    lines.append(_hourly("S3 artifacts", f"{usage.artifacts_gib:g} GiB", s3, usage.artifacts_gib * per_month))
    return lines


def _observability_lines(shape: ClusterShape, usage: Usage, prices: PriceTable) -> list[CostLine]:
    amp = prices.prometheus.usd_per_10m_samples_ingested
    samples_per_hour = usage.amp_active_series * SECONDS_PER_HOUR / usage.amp_scrape_interval_s
    grafana = prices.grafana_usd_per_user_month
    # Grafana licences are monthly per active user: a run pays a whole month once.
    licences = shape.grafana_editors * grafana.editor.usd + shape.grafana_viewers * grafana.viewer.usd
    return [
        _hourly("Managed Prometheus ingestion", f"{usage.amp_active_series} series / {usage.amp_scrape_interval_s} s",
                amp, samples_per_hour / AMP_SAMPLES_PER_UNIT),
        CostLine("Managed Grafana licences", f"{shape.grafana_editors} editor + {shape.grafana_viewers} viewer",
                 0.0, licences, grafana.editor.basis == "estimate" or grafana.viewer.basis == "estimate"),
    ]


def estimate_cost(shape: ClusterShape, prices: PriceTable, *, hours: float, usage: Usage = Usage(),
                  on: datetime.date | None = None) -> CostReport:
    """Cost of keeping ``shape`` deployed for ``hours`` (deploy to teardown) from day ``on`` (default: the price
    table's date), line by line."""
    if hours <= 0:
        raise ValueError(f"hours must be > 0 (got {hours}): the time from deploy to teardown, e.g. 12")
    lines = (
        _compute_lines(shape, prices, on or prices.as_of)
        + _storage_and_network_lines(shape, usage, prices)
        + _observability_lines(shape, usage, prices)
    )
    return CostReport(shape.profile, hours, prices.as_of.isoformat(), prices.region, tuple(lines))


def render_report(report: CostReport) -> str:
    """A fixed-width table: one row a line, then the totals, then which rows are estimates."""
    header = f"{'item':<40} {'quantity':<28} {'$/hour':>9} {'$/run':>10}"
    rows = [
        f"Cost of profile {report.profile!r} deployed for {report.hours:g} h "
        f"(prices as of {report.prices_as_of}, {report.region}, USD)",
        "",
        header,
        "-" * len(header),
    ]
    for line in report.lines:
        mark = " *" if line.estimate else ""
        rows.append(
            f"{line.item + mark:<40} {line.quantity:<28} {line.usd_per_hour:>9.2f} {line.per_run(report.hours):>10.2f}"
        )
    rows.append("-" * len(header))
    rows.append(f"{'total':<40} {'':<28} {report.usd_per_hour:>9.2f} {report.usd_per_run:>10.2f}")
    if report.has_estimates:
        rows.append("\n* estimate: derived, not a published list price; "
                    "see its derivation in workload/ops/prices.yaml")
    return "\n".join(rows)


@dataclass(frozen=True)
class GuardSaving:
    """What the deploy guard (``max_deployed_hours``) saves on a deployment left up ``left_up_hours``.

    Only the GPU group's instance hours count: the guard scales that group to zero and keeps
    everything else (head node, FSx, EKS, NAT), which keeps billing.
    """

    left_up_hours: float
    guard_hours: float
    gpu_usd_per_hour: float

    @property
    def hours_saved(self) -> float:
        return max(0.0, self.left_up_hours - self.guard_hours)

    @property
    def usd_saved(self) -> float:
        return self.hours_saved * self.gpu_usd_per_hour

    @property
    def usd_cap(self) -> float:
        """The most the GPU nodes bill in one deployment: ``guard_hours`` of them."""
        return self.guard_hours * self.gpu_usd_per_hour

    def render_cap(self) -> str:
        return (f"deploy guard: GPU nodes scaled to 0 {self.guard_hours:g} h after the deploy; their bill is capped "
                f"at ${self.usd_cap:,.2f} (${self.gpu_usd_per_hour:.2f}/h); the head node, FSx, EKS and NAT bill "
                "until teardown (-c max_deployed_hours=H changes the limit, 0 turns the guard off)")

    def render(self) -> str:
        if not self.hours_saved:
            return f"deploy guard ({self.guard_hours:g} h): left up {self.left_up_hours:g} h, the guard never fires"
        return (f"deploy guard ({self.guard_hours:g} h): left up {self.left_up_hours:g} h, GPU nodes stop "
                f"{self.hours_saved:g} h early, saving ${self.usd_saved:,.2f} "
                f"(${self.gpu_usd_per_hour:.2f}/h of GPU nodes)")


def guard_saving(shape: ClusterShape, prices: PriceTable, *, left_up_hours: float, guard_hours: float,
                 gpu_group: str = HYPERPOD_GPU_GROUP) -> GuardSaving:
    """The saving of scaling ``gpu_group`` to zero after ``guard_hours`` of a ``left_up_hours`` deployment."""
    if left_up_hours <= 0 or guard_hours <= 0:
        raise ValueError(f"left-up hours ({left_up_hours}) and guard hours ({guard_hours}) must be > 0")
    groups = [g for g in shape.instance_groups if g.name == gpu_group]
    if not groups:
        raise ValueError(f"profile {shape.profile!r} has no instance group {gpu_group!r}")
    usd_per_hour = sum(prices.instance(g.instance_type).usd * g.count for g in groups)
    return GuardSaving(left_up_hours, guard_hours, usd_per_hour)
