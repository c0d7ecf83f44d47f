"""The call path of a scenario from ``simulate()`` to its Program climbs back to a higher
package layer at most 3 times (benchmarks/call_path.py counts it; the ranks are
tests/test_layering.RANKS): each climb is a place where the path's reader goes up a layer
to follow what happens below."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "call_path.py"


def _counter():
    spec = importlib.util.spec_from_file_location("call_path", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_path_climbs_at_most_three_times():
    up = _counter().upward_calls("scenarios/quickstart.yaml")
    assert len(up) <= 3, "calls into a higher layer: " + "; ".join(f"{a} -> {b}" for a, b in sorted(up))


def test_counter_sees_a_call_into_a_higher_layer(monkeypatch):
    """A tiny synthetic pair: ``Program.check`` (unit ``program``, low rank; on every path
    to a Program) replaced by a function of that unit that calls one of unit
    ``compilers`` (higher): the counter reports that edge, and only the climbs it adds."""
    from clustersim.program import Program

    before = _counter().upward_calls("scenarios/quickstart.yaml")
    high = {"__name__": "clustersim.compilers.probe"}
    exec("def climb():\n    return None\n", high)
    low = {"__name__": "clustersim.program", "climb": high["climb"], "check": Program.check}
    exec("def checked(self, *args, **kw):\n    climb()\n    return check(self, *args, **kw)\n", low)
    monkeypatch.setattr(Program, "check", low["checked"])
    up = _counter().upward_calls("scenarios/quickstart.yaml")
    assert up - before == {("clustersim.program.checked", "clustersim.compilers.probe.climb")}
