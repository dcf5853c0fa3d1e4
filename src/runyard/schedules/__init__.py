"""Cron schedules that submit task runs (AxonX 0.2.2's ``schedules:``, plus catch-up and
backfill): :mod:`.cron` computes ticks, :mod:`.store` keeps schedules and their history in
the workspace, :mod:`.firing` applies a concurrency policy, :mod:`.scheduler` holds them all
and :mod:`.ticker` fires them on time. The server builds one :class:`Scheduler` and starts
it with its lifespan (:mod:`runyard.api.routes_schedules`).
"""
