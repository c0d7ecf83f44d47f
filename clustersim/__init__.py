"""clustersim: a discrete-event simulator of distributed DNN training clusters (SimPy).

Public API::

    import clustersim as cs
    sc = cs.load_scenario("scenarios/quickstart.yaml")
    res = cs.simulate(sc.with_overrides({"parallel.schedule": "gpipe"}))
    res.summary, res.spans, res.devices, res.plot_gantt(), res.to_chrome_trace("t.json")
"""

from .errors import ClusterSimError, OutputError, ProgramError, ScenarioError, SimulationStall
from .experiments import SearchResult, search, sweep
from .program import Op, Program
from .scenario import Scenario, load_scenario
from .schedules import SCHEDULES, register_schedule
from .simulate import compile_scenario, simulate
from .trace.bundle import load_result
from .trace.result import Result

__version__ = "0.1.0"

__all__ = [
    "ClusterSimError",
    "Op",
    "OutputError",
    "Program",
    "ProgramError",
    "Result",
    "SCHEDULES",
    "Scenario",
    "ScenarioError",
    "SimulationStall",
    "compile_scenario",
    "load_result",
    "load_scenario",
    "register_schedule",
    "simulate",
    "SearchResult",
    "search",
    "sweep",
]
