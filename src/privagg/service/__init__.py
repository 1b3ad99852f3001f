"""The parties as network services (docs/deployment.md): the client SDK, the collector (the shuffler) and the
analyzer, with HPKE-sealed messages, durable storage and exactly-once reports.

``tasks`` is what all three share (a task, sealing and opening messages); ``client`` is the SDK a device runs;
``collector`` and ``analyzer`` are the two HTTP services over ``storage``; ``loadgen``, ``local`` and ``demo``
drive them from this machine.
"""
