"""Power and energy of a simulated step (docs/energy.md): each GPU's power from its SM
and HBM activity capped at its TDP (:mod:`.gpu_power`), its piecewise-constant trace over
the run (:mod:`.timeline`), and the step's energy with NICs, switches and the facility's
PUE, per token and next to the cost per token (:mod:`.report`)."""

from .gpu_power import GPUPower, check_power_rows, gpu_power
from .report import EnergySettings, attach_energy, energy_summary, energy_table, gpu_traces
from .timeline import PowerTrace

__all__ = [
    "attach_energy",
    "check_power_rows",
    "GPUPower",
    "gpu_power",
    "EnergySettings",
    "energy_summary",
    "energy_table",
    "gpu_traces",
    "PowerTrace",
]
