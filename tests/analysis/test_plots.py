"""Every figure has a title and labelled axes, and draws the data it was given."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from swerl_jax.analysis import plots  # noqa: E402


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def _labelled(ax):
    return ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_histogram_legend_has_n_and_mean():
    fig = plots.reward_histogram({"a": [0.0, 1.0], "b": [0.5, 0.5, 0.5]})
    ax = fig.axes[0]
    assert _labelled(ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a (n=2, mean=0.500)", "b (n=3, mean=0.500)"]


def test_scatter_bar_curves():
    fig = plots.scatter([1, 2, 3], [0.1, 0.2, 0.3], title="t", xlabel="x", ylabel="y", logx=True, c=[1, 2, 3],
                        clabel="c")
    assert _labelled(fig.axes[0]) and len(fig.axes) == 2  # the colour bar
    np.testing.assert_allclose(fig.axes[0].collections[0].get_offsets(), [[1, 0.1], [2, 0.2], [3, 0.3]])
    fig = plots.bar(["ok", "tag_count"], [0.75, 0.25], title="t", ylabel="fraction")
    assert fig.axes[0].get_title() == "t" and [p.get_height() for p in fig.axes[0].patches] == [0.75, 0.25]
    fig = plots.curves({"reward": ([1, 2], [0.1, 0.4]), "kl": ([], [])}, title="t", xlabel="step", ylabel="v",
                       band={"reward": [0.05, 0.05]}, dashed=["reward"])
    ax = fig.axes[0]
    assert _labelled(ax)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["reward", "kl (not logged)"]
    assert ax.lines[0].get_linestyle() == "--"


def test_group_spread_and_estimators():
    rewards = np.array([[0.0, 1.0, np.nan], [0.5, 0.5, 0.5]])
    fig = plots.group_spread(rewards, ["p0", "p1"], title="spread")
    assert fig.axes[0].get_title() == "spread" and fig.axes[0].get_xlabel()
    table = {"grpo": np.zeros((2, 3)), "loo": np.ones((2, 3))}
    fig = plots.estimators_side_by_side(np.nan_to_num(rewards), table, title="side by side")
    assert [ax.get_title() for ax in fig.axes] == ["grpo", "loo"]
    assert all(_labelled(ax) for ax in fig.axes)


def test_scatter_panels():
    fig = plots.scatter_panels({"grpo": ([1, 2], [0.5, -0.5]), "loo": ([1, 2], [0.1, -0.1])}, title="t",
                               xlabel="length", ylabel="advantage")
    assert [ax.get_title() for ax in fig.axes] == ["grpo", "loo"] and all(_labelled(ax) for ax in fig.axes)
    np.testing.assert_allclose(fig.axes[1].collections[0].get_offsets(), [[1, 0.1], [2, -0.1]])
