"""skymaze workload: the maze, the SkyRL plugin, the CPU rehearsal, serving and evaluation.

Dependencies point one way: ``workload.maze`` needs only numpy and PIL; ``skyrl``,
``local``, ``serve`` and ``evaluate`` build on it.
"""
