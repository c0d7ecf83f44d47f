"""``import clustersim`` and the CLI's parser load none of the heavy libraries (the public
names import on first use), and the lazy names are the objects they always were."""

import subprocess
import sys

import pytest

HEAVY = ("pandas", "networkx", "pydantic", "matplotlib", "numpy", "simpy")


def _loaded_after(code: str) -> list[str]:
    """The heavy libraries a fresh interpreter has imported after running ``code``."""
    probe = f"{code}\nimport sys\nprint(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


@pytest.mark.parametrize(
    "code", ["import clustersim", "from clustersim.cli import build_parser; build_parser()"]
)
def test_import_and_cli_parser_load_no_heavy_library(code):
    assert _loaded_after(code) == []


def test_first_use_imports_what_it_needs_and_no_more():
    loaded = _loaded_after("import clustersim; clustersim.Result")
    assert "pandas" in loaded and "matplotlib" not in loaded


def test_lazy_names_are_the_defining_modules_objects():
    import clustersim as cs
    from clustersim.experiments.plan_search import SearchResult, search
    from clustersim.experiments.sweeper import sweep
    from clustersim.scenario import load_scenario
    from clustersim.simulate import simulate

    assert (cs.search, cs.sweep, cs.SearchResult) == (search, sweep, SearchResult)
    assert cs.load_scenario is load_scenario
    # loading the submodule clustersim.simulate binds the package attribute to it; the
    # package keeps giving the function
    assert cs.simulate is simulate and callable(cs.simulate)
    assert set(cs.__all__) <= set(dir(cs))
    with pytest.raises(AttributeError, match="no attribute 'simulat'"):
        cs.simulat  # noqa: B018
