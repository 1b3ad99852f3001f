"""One module per protocol family; each protocol = parameters + calibration + roles + theory.

:mod:`privagg.protocols.registry` lists every protocol (implemented and
planned); :mod:`privagg.protocols.roles` declares the parties' interfaces
per topology; :mod:`privagg.protocols.results` the typed results.
"""
