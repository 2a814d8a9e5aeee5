"""Judging risk models out of sample: metrics, operating points, comparison, the backtest."""
