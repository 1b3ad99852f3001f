"""Whole populations through the protocols' roles: faithful and fast paths, and reports."""

from .frequency import estimate_frequencies
from .runner import SimulationRun, simulate

__all__ = ["SimulationRun", "estimate_frequencies", "simulate"]
