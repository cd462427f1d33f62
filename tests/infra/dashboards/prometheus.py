"""A real Prometheus on loopback (Debian's package) and Grafana's way of running a dashboard's queries.

`make prometheus` unpacks Debian's `prometheus` package into .prometheus/ (no service, no root):
the binary is used from there, or from PATH. Panel queries are run as Grafana runs them over the
time range: template variables resolved (a query variable's values from Prometheus' label values,
"All" as the variable's allValue or every value as a regex alternation), Grafana's interval
variables filled in, each target a range query.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.conftest import ROOT
from workload.localhost import LOOPBACK, free_port

LOCAL_BINARY = ROOT / ".prometheus" / "root" / "usr" / "bin" / "prometheus"
START_TIMEOUT_S = 60
STOP_GRACE_S = 10
HTTP_TIMEOUT_S = 10
# Grafana's interval variables, as they come out for a short range with a 1 s scrape:
# $__rate_interval is at least four scrape intervals (Grafana docs, "Select a time range" / rate_interval).
GRAFANA_INTERVALS = {"__rate_interval": "15s", "__interval": "5s", "__interval_ms": "5000", "__range": "5m",
                     "__range_s": "300", "__range_ms": "300000"}
ALL = "$__all"
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")
LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(?P<selector>.+?)\s*,\s*)?(?P<label>\w+)\s*\)\s*$")
# `q or vector(0)` draws 0 where q has no series: it would hide a query that names nothing real.
OR_ZERO = re.compile(r"\s+or\s+vector\(0\)")
QUERY_RESULT = re.compile(r"^\s*query_result\((?P<expr>.+)\)\s*$")


def binary() -> Path | None:
    """The prometheus binary: the one `make prometheus` unpacked, else one on PATH."""
    if LOCAL_BINARY.is_file():
        return LOCAL_BINARY
    found = shutil.which("prometheus")
    return Path(found) if found else None


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        return json.loads(response.read())


@dataclass
class Prometheus:
    """A running Prometheus; `url` is its HTTP API on loopback."""

    url: str

    def api(self, path: str, **params: str | list[str]) -> list | dict:
        query = urllib.parse.urlencode(params, doseq=True)
        body = _get(f"{self.url}{path}?{query}")
        if body.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {body}")
        return body["data"]

    def query_range(self, expr: str, start: float, end: float, step_s: float = 1.0) -> list[dict]:
        return self.api("/api/v1/query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}",
                        step=f"{step_s}")["result"]

    def label_values(self, label: str, selector: str | None, start: float, end: float) -> list[str]:
        params: dict = {"start": f"{start:.3f}", "end": f"{end:.3f}"}
        if selector:
            params["match[]"] = [selector]
        return sorted(self.api(f"/api/v1/label/{label}/values", **params))

    def targets(self) -> list[dict]:
        return self.api("/api/v1/targets")["activeTargets"]


@contextlib.contextmanager
def running(scrape_configs: list[dict], *, binary_path: Path) -> Iterator[Prometheus]:
    """Prometheus with `scrape_configs`, on a free loopback port, in its own temp folder; stopped after."""
    folder = Path(tempfile.mkdtemp(prefix="smz-prom-"))
    config = folder / "prometheus.yml"
    config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                                      "scrape_configs": scrape_configs}))
    port = free_port()
    command = [str(binary_path), f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
               f"--web.listen-address={LOOPBACK}:{port}", "--log.level=warn"]
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{LOOPBACK}:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"prometheus exited {process.returncode}: {(folder / 'prometheus.log').read_text()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    break
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready within {START_TIMEOUT_S} s")
            time.sleep(0.2)
        yield Prometheus(url)
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_GRACE_S)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def panels(dashboard: dict) -> Iterator[dict]:
    """Every panel with queries, rows' collapsed panels included."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from (p for p in panel.get("panels", []) if p.get("targets"))
        elif panel.get("targets"):
            yield panel


def interpolate(text: str, values: dict[str, str]) -> str:
    """Replace Grafana variables ($x, ${x}, ${x:fmt}, [[x]]) with their values; unknown ones are left."""
    def one(match: re.Match) -> str:
        name = next(g for g in match.groups() if g)
        return values.get(name, match.group(0))

    return VARIABLE.sub(one, text)


def _regex_escape(value: str) -> str:
    """A value as Grafana puts it in a Prometheus regex (its prometheusRegularEscape): each regex
    metacharacter behind a backslash, written doubled inside the PromQL string."""
    return "".join("\\\\" * 2 if c == "\\" else "\\\\" + c if c in "^$*+?.()|{}[]" else c for c in value)


def _regex_alternation(values: list[str]) -> str:
    return "(" + "|".join(_regex_escape(v) for v in values) + ")"


def _query_options(query: str, regex: str, prometheus: Prometheus, start: float, end: float) -> list[str]:
    """A query variable's values: `label_values([selector,] label)`, or `query_result(expr)` (each
    result as Grafana prints it, `{labels} value timestamp`, through the variable's regex)."""
    match = LABEL_VALUES.match(query)
    if match:
        return prometheus.label_values(match["label"], match["selector"], start, end)
    match = QUERY_RESULT.match(query)
    if not match:
        raise ValueError(f"variable query {query!r} is neither label_values(...) nor query_result(...)")
    lines = []
    for result in prometheus.api("/api/v1/query", query=match["expr"], time=f"{end:.3f}")["result"]:
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(result["metric"].items()))
        lines.append(f"{{{labels}}} {result['value'][1]} {result['value'][0]}")
    if not regex:
        return sorted(lines)
    pattern = re.compile(regex.replace("(?<", "(?P<"))
    found = (pattern.search(line) for line in lines)
    return sorted({(m.group("value") if "value" in m.groupdict() else m.group(1)) for m in found if m})


def resolve_variables(dashboard: dict, prometheus: Prometheus, start: float, end: float,
                      selected: dict[str, str] | None = None) -> dict[str, str]:
    """Each variable's value for queries, in dashboard order (later variables may use earlier ones);
    ``selected`` picks one option of a query variable as a user would (it must be among the options)."""
    values: dict[str, str] = dict(GRAFANA_INTERVALS)
    selected = selected or {}
    for variable in dashboard.get("templating", {}).get("list", []):
        name, kind = variable["name"], variable.get("type")
        if kind == "datasource":
            continue
        if name in selected:
            query = variable.get("query")
            query = query.get("query", "") if isinstance(query, dict) else (query or "")
            options = _query_options(interpolate(query, values), variable.get("regex") or "", prometheus, start, end)
            if selected[name] not in options:
                raise ValueError(f"variable {name}: {selected[name]!r} is not among its options {options}")
            values[name] = _regex_escape(selected[name])
            continue
        if kind in ("custom", "interval"):
            options = [o["value"] for o in variable.get("options", []) if o.get("value") != ALL]
            if not options and isinstance(variable.get("query"), str):
                options = [o.strip() for o in variable["query"].split(",") if o.strip()]
        elif kind == "query":
            if variable.get("includeAll") and variable.get("allValue"):
                values[name] = variable["allValue"]  # "All" does not depend on the values
                continue
            query = variable.get("query")
            query = query.get("query", "") if isinstance(query, dict) else (query or "")
            options = _query_options(interpolate(query, values), variable.get("regex") or "", prometheus, start, end)
        elif kind in ("constant", "textbox"):
            values[name] = str(variable.get("query", ""))
            continue
        else:
            raise ValueError(f"variable {name}: type {kind!r}: teach resolve_variables")
        if kind == "interval":
            values[name] = options[0] if options else GRAFANA_INTERVALS["__interval"]
        elif variable.get("includeAll"):
            values[name] = variable.get("allValue") or _regex_alternation(options)
        else:
            values[name] = _regex_escape(options[0]) if options else ""
    return values


@dataclass(frozen=True)
class TargetResult:
    dashboard: str
    panel: str
    ref_id: str
    expr: str
    series: int
    error: str | None = None


def evaluate(dashboard: dict, prometheus: Prometheus, start: float, end: float,
             selected: dict[str, str] | None = None) -> list[TargetResult]:
    """Every target of every panel of `dashboard`, run over [start, end] as Grafana would (less any
    `or vector(0)`, which would make a query of nothing look like data), with ``selected`` variable options."""
    values = resolve_variables(dashboard, prometheus, start, end, selected)
    results = []
    for panel in panels(dashboard):
        for target in panel["targets"]:
            if target.get("hide") or not target.get("expr"):
                continue
            expr = OR_ZERO.sub("", interpolate(target["expr"], values))
            try:
                series = sum(1 for s in prometheus.query_range(expr, start, end) if s.get("values"))
                error = None
            except (urllib.error.HTTPError, RuntimeError) as exc:
                series, error = 0, str(exc)[:300]
            results.append(TargetResult(dashboard["uid"], panel["title"], target.get("refId", "?"), expr, series, error))
    return results
