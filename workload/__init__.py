"""skymaze workload: the maze, the SkyRL plugin, the CPU rehearsal, serving and evaluation.

Dependencies point one way, from the command line down to the maze: ``cli`` on top; the
rehearsal (``local``) and AWS operations (``ops``); serving, endpoint evaluation and the
SkyRL plugin; the shared Qwen3-VL code (``model``); the maze with its episodes and metrics
(``maze``, numpy and PIL only); file and port helpers at the bottom. The layers contract of
``.importlinter`` is the order; ``lint-imports`` fails on an import that points up or sideways.
"""
