"""Regenerate the pictures the README shows: ``python docs/make_images.py``."""

from pathlib import Path

import matplotlib.pyplot as plt

import clustersim as cs

HERE = Path(__file__).parent


def main() -> None:
    res = cs.simulate(cs.load_scenario(HERE.parent / "scenarios" / "quickstart.yaml"))
    for name, fig in (("quickstart-gantt.png", res.plot_gantt()), ("quickstart-utilization.png", res.plot_utilization())):
        fig.savefig(HERE / "img" / name, dpi=90, bbox_inches="tight")
        plt.close(fig)


if __name__ == "__main__":
    main()
