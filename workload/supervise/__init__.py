"""Run supervisor: keep a submitted recipe running to its last step, then free what it held.

``machine`` is the pure decision function (observations in, one action out); ``causes``
reads a failed job's message and log tail; ``telemetry`` writes each decision as a JSON line
and a Prometheus series; ``ray_jobs``, ``kube`` and ``hyperpod`` are the thin edges; ``loop``
ties them together for ``skymaze supervise``.
"""
