"""Every Python process of the contract suite's Ray head: flash-attn without its CUDA kernels.

SkyRL's FSDP worker module imports ``flash_attn.bert_padding`` (plain torch code), but
``flash_attn/__init__.py`` first loads the CUDA extension, which the contract environment's
CPU build does not have (tests/contract/conftest.py does the same in the test process). Here a
finder serves ``flash_attn`` as a package whose ``__init__`` is not run, only when something
imports it: Ray's own helper processes import nothing more at start-up.
"""

from __future__ import annotations

import importlib.machinery
import sys


class _FlashAttnWithoutKernels:
    """A meta path finder for the name ``flash_attn`` only."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name != "flash_attn":
            return None
        real = importlib.machinery.PathFinder.find_spec(name, path)
        if real is None or not real.submodule_search_locations:
            return None
        spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
        spec.submodule_search_locations = list(real.submodule_search_locations)
        return spec


sys.meta_path.insert(0, _FlashAttnWithoutKernels())
