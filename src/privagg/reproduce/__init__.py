"""Reproductions of the papers' evaluations: tables (CSV) and plots (PNG) written by ``privagg reproduce``."""
