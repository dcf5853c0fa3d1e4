"""MLflow's tracking REST API, served so that MLflow's own client records runyard tasks.

``errors`` (MLflow's error shape), ``experiments`` (an experiment is a task name),
``lookup`` (runs by id), ``runview`` (a run as MLflow's ``Run``), ``record`` (the runs
MLflow's client opens, logs to and ends), ``search`` (``search_runs`` filters, ordering,
paging), ``artifacts`` (the ``mlflow-artifacts`` API over a run's folder) and ``routes``.
"""
