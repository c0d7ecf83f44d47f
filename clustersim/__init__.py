"""clustersim: a discrete-event simulator of distributed DNN training clusters (SimPy).

Public API::

    import clustersim as cs
    sc = cs.load_scenario("scenarios/quickstart.yaml")
    res = cs.simulate(sc.with_overrides({"parallel.schedule": "gpipe"}))
    res.summary, res.spans, res.devices, res.plot_gantt(), res.to_chrome_trace("t.json")
    cs.export_chakra(sc, "et/")   # Chakra ET files, one per rank; model: {kind: trace, chakra: et/} reads them

The names below are imported on first use (PEP 562), so ``import clustersim`` and
``clustersim --help`` stay fast: pydantic, pandas, networkx and the experiments package
load when a scenario, a simulation or a sweep first needs them.
"""

import importlib
import sys
import types

from .errors import ClusterSimError, OutputError, ProgramError, ScenarioError, SimulationStall

__version__ = "0.1.0"

#: public name → the module that defines it (relative to this package)
_LAZY = {
    "Op": ".program",
    "Program": ".program",
    "Result": ".trace.result",
    "SCHEDULES": ".schedules",
    "Scenario": ".scenario",
    "SearchResult": ".experiments",
    "compile_scenario": ".simulate",
    "export_chakra": ".simulate",
    "import_chakra": ".interop.chakra_import",
    "load_result": ".trace.bundle",
    "load_scenario": ".scenario",
    "register_schedule": ".schedules",
    "resolve_scenario": ".simulate",
    "search": ".experiments",
    "simulate": ".simulate",
    "sweep": ".experiments",
}

__all__ = ["ClusterSimError", "OutputError", "ProgramError", "ScenarioError", "SimulationStall", *_LAZY]


class _Package(types.ModuleType):
    """This package's module type. ``simulate`` names both a submodule and the function it
    defines; when the submodule loads, the import system binds the package attribute to
    the module, so here ``simulate`` is a property that always gives the function (as the
    eager ``from .simulate import simulate`` did) and ignores that binding."""

    @property
    def simulate(self):
        return importlib.import_module(".simulate", __name__).simulate

    @simulate.setter
    def simulate(self, module) -> None:
        """The import system binding the ``clustersim.simulate`` submodule: ignored."""

    def __getattr__(self, name: str):
        if name not in _LAZY:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        setattr(self, name, value)  # later lookups skip this method
        return value

    def __dir__(self):
        return sorted({*super().__dir__(), *_LAZY})


sys.modules[__name__].__class__ = _Package  # a module may change its own type (Python ≥ 3.5)
