"""Figures for every picture: an Agg-canvas Figure, and how it shows in Jupyter."""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from ..progress import in_jupyter


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A Figure outside pyplot (Agg canvas): nothing global to close, no double display in
    Jupyter (the returned Figure shows once), and ``savefig`` works on any machine."""
    fig = Figure(figsize=figsize)
    FigureCanvasAgg(fig)
    _show_figures_in_jupyter()
    return fig


def _figure_png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _show_figures_in_jupyter() -> None:
    """In Jupyter, make a returned Figure render as a PNG (as matplotlib's inline backend
    does for pyplot figures); kept if a formatter for Figure is already registered."""
    if not in_jupyter():
        return
    import IPython

    formatter = IPython.get_ipython().display_formatter.formatters["image/png"]
    if Figure not in formatter.type_printers:
        formatter.for_type(Figure, _figure_png)
