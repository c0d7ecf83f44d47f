"""Regenerate the pictures the README shows: ``python docs/make_images.py``.

Writes docs/img/quickstart-{gantt,utilization,breakdown,memory}.png from the quickstart
scenario; look at them after every change to clustersim/viz.
"""

from pathlib import Path

import clustersim as cs

HERE = Path(__file__).parent


def main() -> None:
    res = cs.simulate(cs.load_scenario(HERE.parent / "scenarios" / "quickstart.yaml"), progress=False)
    # one GPU per pipeline stage (TP rank 0 of replica 0): the 1F1B shape, readable at README size
    stage_heads = [
        res.devices.loc[res.devices["stage"] == s, "device"].iloc[0]
        for s in sorted(res.devices["stage"].unique())
    ]
    pictures = {
        "quickstart-gantt.png": res.plot_gantt(devices=stage_heads),
        "quickstart-utilization.png": res.plot_utilization(),
        "quickstart-breakdown.png": res.plot_breakdown(),
        "quickstart-memory.png": res.plot_memory(),
    }
    for name, fig in pictures.items():
        fig.savefig(HERE / "img" / name, dpi=90, bbox_inches="tight")


if __name__ == "__main__":
    main()
