"""Analysis of rewards and advantages: the API behind notebooks/reward_analysis.ipynb and advantage_analysis.ipynb.

runs.py loads a run's workdir; rewards.py scores real predictions and tabulates format errors; edits.py
perturbs gold answers under control; advantages.py compares estimators on the same groups; simulate.py
makes a run when none is given; plots.py draws the figures.
"""

from swerl_jax.analysis.runs import Run, RunFormatError, load_metrics, load_rollouts, load_run

__all__ = ["Run", "RunFormatError", "load_metrics", "load_rollouts", "load_run"]
