"""Matplotlib figures for the analysis notebooks; each function returns a labelled Figure."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


def reward_histogram(series: dict[str, Sequence[float]], bins: int = 20, title: str = "Reward distribution",
                     xlabel: str = "reward") -> Figure:
    """Overlaid histograms of one or more reward series (legend shows n and mean)."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, values in series.items():
        v = np.asarray(values, dtype=float)
        ax.hist(v, bins=bins, alpha=0.6, label=f"{name} (n={v.size}, mean={v.mean():.3f})")
    ax.set(title=title, xlabel=xlabel, ylabel="count")
    ax.legend()
    fig.tight_layout()
    return fig


def scatter(x: Sequence[float], y: Sequence[float], title: str, xlabel: str, ylabel: str,
            logx: bool = False, c: Sequence[float] | None = None, clabel: str = "") -> Figure:
    """A labelled scatter plot, optionally coloured by a third value."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    points = ax.scatter(x, y, s=14, alpha=0.7, c=c)
    if c is not None:
        fig.colorbar(points, ax=ax, label=clabel)
    if logx:
        ax.set_xscale("symlog", linthresh=1)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def bar(labels: Sequence[str], values: Sequence[float], title: str, ylabel: str) -> Figure:
    """A labelled bar chart (values written above the bars)."""
    fig, ax = plt.subplots(figsize=(6.5, 4))
    bars = ax.bar(range(len(labels)), values)
    ax.set_xticks(range(len(labels)), labels, rotation=25, ha="right")
    ax.bar_label(bars, fmt="%.3g")
    ax.set(title=title, ylabel=ylabel)
    fig.tight_layout()
    return fig


def curves(series: dict[str, tuple[Sequence[float], Sequence[float]]], title: str, xlabel: str, ylabel: str,
           band: dict[str, Sequence[float]] | None = None, dashed: Sequence[str] = ()) -> Figure:
    """Line plots of (x, y) series, with an optional ±band per series; a note when a series is empty.

    Series named in `dashed` are drawn dashed with open markers, so one that coincides with another stays visible.
    """
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, (x, y) in series.items():
        if len(x) == 0:
            ax.plot([], [], label=f"{name} (not logged)")
            continue
        if name in dashed:
            ax.plot(x, y, ls="--", marker="o", ms=8, mfc="none", label=name)
        else:
            ax.plot(x, y, marker="o", ms=3, label=name)
        if band and name in band:
            y, b = np.asarray(y, dtype=float), np.asarray(band[name], dtype=float)
            ax.fill_between(x, y - b, y + b, alpha=0.2)
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig


def group_spread(rewards: np.ndarray, prompt_ids: Sequence[str], title: str) -> Figure:
    """Each group's rewards as dots on one row, with the group mean marked: how much a group varies."""
    fig, ax = plt.subplots(figsize=(6.5, 0.5 + 0.45 * len(prompt_ids)))
    for p, row in enumerate(rewards):
        row = row[~np.isnan(row)]
        ax.scatter(row, np.full(row.size, p), s=18, alpha=0.6, color="tab:blue")
        ax.scatter([row.mean()], [p], marker="|", s=300, color="tab:red")
    ax.set_yticks(range(len(prompt_ids)), [str(pid)[-28:] for pid in prompt_ids], fontsize=7)
    ax.set(title=title, xlabel="reward (blue: samples, red: group mean)")
    ax.invert_yaxis()
    fig.tight_layout()
    return fig


def estimators_side_by_side(rewards: np.ndarray, table: dict[str, np.ndarray], title: str) -> Figure:
    """One panel per estimator: advantage vs reward for the same samples, one colour per group."""
    fig, axes = plt.subplots(1, len(table), figsize=(4 * len(table), 3.6), sharey=False, squeeze=False)
    colors = plt.cm.tab10(np.arange(rewards.shape[0]) % 10)
    for ax, (kind, adv) in zip(axes[0], table.items(), strict=True):
        for p in range(rewards.shape[0]):
            ax.scatter(rewards[p], adv[p], s=16, alpha=0.7, color=colors[p])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(title=kind, xlabel="reward", ylabel="advantage")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def scatter_panels(panels: dict[str, tuple[Sequence[float], Sequence[float]]], title: str, xlabel: str,
                   ylabel: str) -> Figure:
    """One scatter panel per named (x, y) series, side by side, sharing the x axis label."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, (name, (x, y)) in zip(axes[0], panels.items(), strict=True):
        ax.scatter(x, y, s=12, alpha=0.6)
        ax.axhline(0, color="grey", lw=0.8)
        ax.set(title=name, xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
