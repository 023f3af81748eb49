"""The allocator wrappers (torch.empty/zeros/ones/... for pinned allocations) must not break
TorchScript: ``torch.jit.script`` resolves ``torch.ones`` through a table keyed by id().
Black-box, in fresh processes: a module scripting a function at import, during the start-up
and after ready(), against the same script without the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.process  # starts fresh Python processes: not in `make test-fast`

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    import torch.jit._builtins as builtins
    if sys.argv[1] == "table-built-while-wrapped":
        builtins._builtin_table = None  # as on a torch that builds it lazily, on first use
    import otel_coldstart
    if sys.argv[2] == "instrumented":
        otel_coldstart.instrument(start_at="instrument", summary=False, handle_sigterm=False)

    @torch.jit.script
    def during(n: int):
        return torch.ones(n) + torch.zeros(n) + torch.empty(n).fill_(0) + torch.full([n], 1.0)

    print("during", during(3).tolist())
    # What torch.ones is now (our wrapper while instrumented) resolves to the original's op.
    print("registered", builtins._builtin_table.get(id(torch.ones)), type(torch.ones).__name__ != "builtin_function_or_method")
    otel_coldstart.ready()

    @torch.jit.script
    def after(n: int):
        return torch.ones(n) * 2

    print("after", after(2).tolist())
    print("during-again", during(2).tolist())
    allocators = ("empty", "zeros", "ones", "full", "empty_strided", "tensor")
    wrapper_ids = [id(vars(torch)[n]) for n in allocators if type(vars(torch)[n]).__name__ == "ColdstartWrapper"]
    print("wrappers-left", len(wrapper_ids), "table-entries", sum(i in builtins._builtin_table for i in wrapper_ids))
""")


@pytest.mark.parametrize("table", ["table-built-at-import", "table-built-while-wrapped"])
def test_scripting_torch_allocators_works_during_and_after_the_startup(tmp_path, table):
    script = tmp_path / "model_code.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=ROOT, OTEL_COLDSTART_SUMMARY="0")
    outputs = {}
    for mode in ("plain", "instrumented"):
        result = subprocess.run([sys.executable, str(script), table, mode], env=env, capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        outputs[mode] = result.stdout
    # Same results; only "is torch.ones wrapped right now" differs during the start-up.
    assert outputs["instrumented"].replace("aten::ones True", "aten::ones False") == outputs["plain"]
    assert "registered aten::ones True" in outputs["instrumented"]
    assert "during [2.0, 2.0, 2.0]" in outputs["plain"] and "wrappers-left 0 table-entries 0" in outputs["plain"]
