"""The shuffle model's services: the client SDK (``client``), the collector (the shuffler: ``collector``) and the
analyzer (``analyzer`` over ``analyzer_*``, ``workers``, ``partitions``, ``aggregate_codec``, ``console``), with
``loadgen``, ``deployment`` and ``demo`` driving them from this machine.
"""
