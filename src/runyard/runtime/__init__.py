"""The worker side (one task run per process) and the supervisor (launch, track, cancel, reap,
reconcile). Import from the submodules: ``supervisor``, ``liveness``, ``launch``."""
