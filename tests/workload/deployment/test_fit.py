"""Cluster fit: instance facts, kubelet reservation, and the Ray pod sizes derived from them."""

from __future__ import annotations

import pytest

from workload.deployment import fit
from workload.deployment.settings import GPU_INSTANCES, HEAD_INSTANCES, SettingsError, load_settings


def test_every_selectable_instance_type_has_facts_with_a_source():
    assert set(GPU_INSTANCES) | set(HEAD_INSTANCES) == set(fit.INSTANCES)
    for name, facts in fit.INSTANCES.items():
        assert facts.source.startswith("https://"), name
        assert (facts.gpus > 0) == (name in GPU_INSTANCES)


def test_published_facts_of_the_blog_topology():
    # AWS: g7e.12xlarge = 48 vCPUs, 512 GiB, 2 RTX PRO 6000, 1 EFA; r5d.16xlarge = 64 vCPUs, 512 GiB.
    g7e, r5d = fit.INSTANCES["ml.g7e.12xlarge"], fit.INSTANCES["ml.r5d.16xlarge"]
    assert (g7e.vcpus, g7e.memory_gib, g7e.gpus, g7e.efa) == (48, 512, 2, 1)
    assert (r5d.vcpus, r5d.memory_gib, r5d.gpus, r5d.efa) == (64, 512, 0, 0)


@pytest.mark.parametrize(("vcpus", "millicores"), [(1, 60), (2, 70), (4, 80), (16, 110), (24, 130), (64, 230)])
def test_kube_reserved_cpu_follows_the_eks_ami_formula(vcpus, millicores):
    assert fit.kube_reserved_cpu_m(vcpus) == millicores


def test_kube_reserved_memory_follows_the_eks_ami_formula():
    assert fit.kube_reserved_memory_mib(49) == 11 * 49 + 255 == 794


def test_threads_per_core_one_halves_the_vcpus_a_node_offers():
    g7e = fit.INSTANCES["ml.g7e.12xlarge"]
    assert fit.capacity(g7e, 1).cpu_m == 24_000
    assert fit.capacity(g7e, 2).cpu_m == 48_000
    assert fit.allocatable(g7e, 1).cpu_m == 24_000 - 130


def test_the_former_worker_request_of_36_cpus_cannot_fit_a_g7e_node_without_smt():
    with pytest.raises(SettingsError) as caught:
        load_settings({"profile": "blog", "worker_pod_cpu": "36"})
    message = str(caught.value)
    assert "worker_pod_cpu=36" in message and "ml.g7e.12xlarge" in message
    assert "worker_threads_per_core=1" in message and "23.87 CPU" in message


@pytest.mark.parametrize("profile", ["blog", "small"])
def test_every_ray_pod_of_the_profile_fits_its_node(profile):
    settings = load_settings({"profile": profile})
    for group in settings.cluster_fit():
        assert group.fits, group.rows()
        total = group.system
        for pod in group.pods:
            total = total + pod.resources
        assert group.allocatable.covers(total)
    sizes = settings.pod_sizes()
    assert sizes.worker.gpus == 2 and sizes.worker.cpu >= sizes.worker.gpus
    assert (sizes.serve_head is not None) == (profile == "blog")


def test_a_head_node_too_small_for_the_heads_fails_naming_the_key_and_the_numbers(monkeypatch):
    from workload.deployment import fit
    from workload.deployment import settings as deploy_settings

    # ml.m5.xlarge: 4 vCPUs, 16 GiB (AWS's EC2 general purpose table): after the kubelet reservation and the
    # system pods, too small for the trainer's head even without serving.
    small_node = fit.InstanceFacts(4, 16, 0, 0, fit.KUBELET_DEFAULT_MAX_PODS, fit.EC2_GENERAL_PURPOSE)
    monkeypatch.setitem(fit.INSTANCES, "ml.m5.xlarge", small_node)
    monkeypatch.setitem(deploy_settings.HEAD_INSTANCES, "ml.m5.xlarge", small_node)
    with pytest.raises(SettingsError) as caught:
        load_settings({"profile": "small", "head_instance_type": "ml.m5.xlarge"})
    message = str(caught.value)
    assert "head_instance_type=ml.m5.xlarge (trainer head " in message
    assert "trainer ray head gets " in message and "needs >= 4 / 16" in message
    assert "choose a larger head_instance_type (ml.r5d.16xlarge, " in message and "head_pod_cpu" not in message


def test_explicit_pod_sizes_that_fit_are_kept():
    sizes = load_settings({"profile": "small", "worker_pod_cpu": "16", "worker_pod_memory_gib": "400"}).pod_sizes()
    assert (sizes.worker.cpu, sizes.worker.memory_gib) == (16, 400)


def test_smt_on_the_workers_nearly_doubles_the_derived_worker_cpu():
    off = load_settings({"profile": "blog"}).pod_sizes().worker.cpu
    on = load_settings({"profile": "blog", "worker_threads_per_core": "2"}).pod_sizes().worker.cpu
    # 24 more vCPUs, less 60m more kube-reserved: 44.44 CPUs free beyond the margin, 44 whole.
    assert (off, on) == (20, 44)


def test_fit_rows_show_allocatable_and_requested():
    head, workers = load_settings({"profile": "blog"}).cluster_fit()
    text = "\n".join(head.rows() + workers.rows())
    assert "workers (ml.g7e.12xlarge, ThreadsPerCore=1): allocatable 23.87 CPU" in text
    assert "ray worker: 20 CPU" in text and "fits" in text


def _pod(name: str) -> fit.SystemPod:
    (pod,) = [p for p in fit.SYSTEM_PODS if p.name.startswith(name)]
    return pod


def test_the_health_monitoring_agent_counts_as_its_chart_requests_on_gpu_nodes_only():
    agent = _pod("health-monitoring-agent")
    assert (agent.where, agent.cpu_m, agent.memory_mib, agent.estimated) == ("gpu", 500, 512, False)
    assert "v3.7.1" in agent.source


@pytest.mark.parametrize(("setting", "feature", "instance_type"),
                         [("supervisor", fit.SUPERVISOR, "ml.r5d.16xlarge"), ("ray_endpoint", fit.RAY_ENDPOINT, "ml.g7e.12xlarge")])
def test_optional_pods_count_where_they_run_when_they_are_installed(setting, feature, instance_type):
    facts = fit.INSTANCES[instance_type]
    with_it, without = fit.system_requests(facts, frozenset({feature})), fit.system_requests(facts, frozenset())
    assert with_it[0] > without[0] and with_it[1] > without[1]
    extra = {"ray_endpoint": {"ray_endpoint": True, "ray_endpoint_domain": "ray.example.com",
                              "ray_endpoint_hosted_zone_id": "Z123"}, "supervisor": {}}[setting]
    assert feature in load_settings({"profile": "blog", setting: True, **extra}).fit_features
    assert feature not in load_settings({"profile": "blog", setting: False}).fit_features


@pytest.mark.parametrize("profile", ["blog", "small"])
def test_every_node_keeps_the_named_margin_after_every_counted_pod(profile):
    for group in load_settings({"profile": profile}).cluster_fit():
        left = group.allocatable - group.requested  # requested includes the system pods and the margin
        assert left.cpu_m >= 0 and left.memory_mib >= 0, group.rows()
        counted = group.requested - fit.Resources(fit.NODE_MARGIN_CPU_M, fit.NODE_MARGIN_MEMORY_MIB)
        spare = group.allocatable - counted
        assert spare.cpu_m >= fit.NODE_MARGIN_CPU_M and spare.memory_mib >= fit.NODE_MARGIN_MEMORY_MIB, group.rows()
