"""The parties as network services (issue 11, under way): tasks and HPKE-sealed reports so far.

``tasks`` is shared by the client SDK (:mod:`privagg.service.client`), the collector and the analyzer: what a
task is, how a message is sealed to the analyzer, and how a batch of sealed messages is opened.
"""
