"""TSS and TSS' as two servers: S1 and S2 (``servers``), a user's SDK against S1 (``client``) and the demo
(``demo``)."""
