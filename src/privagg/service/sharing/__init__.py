"""The sharing server of DPDS and DPDG (``server``), a user's SDK (``client``) and the demo (``demo``)."""
