"""Fleet simulator: raw GPU telemetry in real formats, with failures and their ground truth.

>>> from foreshock.simulate import simulate_fleet
>>> summary = simulate_fleet("data/raw/sim", units=64, days=7, seed=1)  # doctest: +SKIP
"""

from foreshock.simulate.params import SimulationParams
from foreshock.simulate.simulator import simulate_fleet

__all__ = ["SimulationParams", "simulate_fleet"]
