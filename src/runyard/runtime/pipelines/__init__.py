"""Pipeline runs on the server: the request checked whole (``plan``), the durable record
(``records``), making, viewing and cancelling runs (``runs``)."""
