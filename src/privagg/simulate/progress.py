"""The progress callback every long simulation stage reports to: ``progress(stage, advance, total)``, where
``advance`` is the work done since the previous call on ``stage`` (the CLI draws bars or prints lines)."""

from collections.abc import Callable

Progress = Callable[[str, int, int], None]
