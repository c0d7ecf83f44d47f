"""How often the call path of a scenario from ``simulate()`` to its Program returns to a higher layer.

    python benchmarks/call_path.py                          # the quickstart and a few shipped scenarios
    python benchmarks/call_path.py scenarios/x.yaml -v      # one scenario, listing its upward calls

The package layers are the ranks of tests/test_layering.py (bottom first): a unit imports
only lower ranks, so a call that climbs to a higher rank comes back through an object or a
callback a higher layer handed down (a Job property read by a compiler, a rule of the
scenario that asks a lower layer and is asked back, …). Each such climb is a place where a
reader following the path must go up a layer to understand what happens below.

The script runs ``simulate()`` under :func:`sys.setprofile` until the Program reaches
``clustersim/simulate.py`` (the compile step's return) and counts the distinct *static*
call edges — (caller function, callee function) pairs, not calls — whose callee's unit
ranks higher than its caller's. A frame outside clustersim (pydantic, functools, …) is
skipped: the caller is the nearest clustersim frame below it; so is the resumption of a
generator expression a caller handed down (``sum(x for x in …)``: the caller's own code). tests/test_call_path.py
holds the quickstart's count to at most 3.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_layering import RANK  # noqa: E402

SCENARIOS = [
    "scenarios/quickstart.yaml",
    "scenarios/synthetic-4stage-1f1b.yaml",
    "scenarios/pipedream-vgg16-16xV100-10GbE-15-1.yaml",
    "scenarios/ps-edge-16workers-20mbit.yaml",
    "scenarios/gpt-7.5b-64xh100-balanced.yaml",
]


def _unit(frame) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if name == "clustersim":
        return "__init__"
    if not name.startswith("clustersim."):
        return None
    return name.split(".")[1]


def _where(frame) -> str:
    code = frame.f_code
    return f"{frame.f_globals['__name__']}.{code.co_qualname}"


def upward_calls(scenario: str | Path) -> set[tuple[str, str]]:
    """The distinct ``(caller, callee)`` function pairs of ``simulate(scenario)``'s path to
    its Program whose callee ranks above its caller (tests/test_layering.RANKS)."""
    from clustersim import simulate
    from clustersim.program import Program

    up: set[tuple[str, str]] = set()

    def profile(frame, event, arg):
        if event == "return" and isinstance(arg, Program) and _unit(frame.f_back) == "simulate":
            sys.setprofile(None)  # the Program is compiled: the path ends here
            raise _Compiled
        if event != "call":
            return
        callee = _unit(frame)
        if callee is None or frame.f_code.co_name == "<genexpr>":
            return  # (a generator expression handed down is the caller's own expression, resumed)
        caller = frame.f_back
        while caller is not None and _unit(caller) is None:
            caller = caller.f_back
        if caller is not None and RANK[callee] > RANK[_unit(caller)]:
            up.add((_where(caller), _where(frame)))

    sys.setprofile(profile)
    try:
        simulate(str(ROOT / scenario) if not Path(scenario).is_absolute() else scenario, progress=False)
    except _Compiled:
        pass
    finally:
        sys.setprofile(None)
    return up


class _Compiled(Exception):
    """Raised from the profiler once the Program is compiled: the rest of the run is not counted."""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenarios", nargs="*", default=SCENARIOS)
    ap.add_argument("-v", "--verbose", action="store_true", help="list each upward call")
    args = ap.parse_args()
    for scenario in args.scenarios:
        up = upward_calls(scenario)
        print(f"{len(up):3d}  {scenario}")
        if args.verbose:
            for caller, callee in sorted(up):
                print(f"       {caller}  ->  {callee}")


if __name__ == "__main__":
    main()
